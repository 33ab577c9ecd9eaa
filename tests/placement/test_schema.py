"""The log schema: column groups, required columns, spill-fact types, the density floor and
the derived columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from placement.errors import SchemaError
from placement.features import clean_table
from placement.schema import (
    CREATION_COLUMNS,
    ID_COLUMNS,
    LOG_DENSITY_FLOOR,
    OUTCOME_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    conform,
    empty_table,
    log_io_density,
    with_derived,
)
from tests.placement.logtables import make_log

REQUIRED = [
    "file_id",
    "pipeline",
    "run_id",
    "stage",
    "created_at",
    "file_kind",
    "deleted_at",
    "size_bytes",
    "read_ops",
    "write_ops",
    "read_bytes",
    "write_bytes",
]


def test_id_creation_and_outcome_columns_cover_the_schema_once_in_order() -> None:
    assert [*ID_COLUMNS, *CREATION_COLUMNS, *OUTCOME_COLUMNS] == SCHEMA.names
    assert {"reuse_distance", "n_dependents", "created_at"} <= set(CREATION_COLUMNS)
    assert {"deleted_at", "size_bytes", "read_ops", "write_ops", "tier"} <= set(OUTCOME_COLUMNS)


@pytest.mark.parametrize("column", REQUIRED)
def test_a_table_without_a_required_column_is_refused_naming_it(column: str) -> None:
    table = make_log(pipelines=1, runs=1, files_per_stage=2).drop_columns([column])
    with pytest.raises(SchemaError, match=f"lacks required column.*'{column}'"):
        conform(table)


def test_the_spill_facts_are_nullable_32_bit_integers_whatever_type_they_arrive_in() -> None:
    table = make_log(pipelines=1, runs=1, files_per_stage=2)
    wide = table.set_column(
        table.schema.get_field_index("n_dependents"),
        "n_dependents",
        table["n_dependents"].cast(pa.int64()),
    )
    out = conform(wide)
    for name in ("reuse_distance", "n_dependents"):
        assert out.schema.field(name).type == pa.int32() and out.schema.field(name).nullable
    assert out["n_dependents"].to_pylist() == table["n_dependents"].to_pylist()


def test_a_file_without_io_has_log_density_minus_20_below_files_with_io() -> None:
    day_s = 86400.0
    logs = log_io_density(
        np.array([0, 1]), np.array([0, 0]), np.array([2**20, 2**30]), np.array([10.0, day_s])
    )
    assert LOG_DENSITY_FLOOR == logs[0] == -20.0
    assert logs[1] == pytest.approx(-np.log10(2**30 * day_s))  # one read of 1 GiB in a day
    assert logs[1] > logs[0]


def test_deriving_twice_replaces_lifetime_and_density_instead_of_adding_them_again() -> None:
    table = make_log(pipelines=1, runs=1, files_per_stage=2)
    once = with_derived(table)
    twice = with_derived(once)
    assert twice.column_names == [*table.column_names, "lifetime_s", "io_density"]
    assert twice["lifetime_s"].equals(once["lifetime_s"])
    assert twice["io_density"].equals(once["io_density"])


def test_the_empty_table_has_the_schema_and_declares_its_version() -> None:
    table = empty_table()
    assert table.num_rows == 0 and table.schema.equals(SCHEMA)
    assert table.schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
    assert conform(table).num_rows == 0


def test_nulls_in_a_required_column_are_kept_for_the_readers_to_count() -> None:
    table = make_log(pipelines=1, runs=1, files_per_stage=2)
    kinds = table["file_kind"].to_pylist()
    kinds[0] = None
    holed = table.set_column(
        table.schema.get_field_index("file_kind"),
        pa.field("file_kind", pa.string()),
        pa.array(kinds, pa.string()),
    )
    out = conform(holed)
    assert out.num_rows == table.num_rows and out["file_kind"].null_count == 1
    rows, issues = clean_table(out)
    assert len(rows) == table.num_rows - 1 and issues.dropped == {"null file_kind": 1}
