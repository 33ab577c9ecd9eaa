"""The placement I/O log: one row per temporary (intermediate) file.

A row is written when the file is deleted. It holds three groups of columns:

* **ids** - which file, of which pipeline run, stage and worker;
* **creation-time facts** - what is known when the file must be placed; only these
  may be used as model features (see :mod:`placement.features`);
* **outcome** - what happened to the file over its life: size, operations and bytes.

I/O density
-----------
``io_density = (read_ops + write_ops) / (size_bytes * lifetime_s)``, in operations per
byte per second. It is the file's demand for random I/O per byte of capacity it holds:
a file of 1 MiB read 100 times in 10 s has density ``100 / (2**20 * 10) ~= 9.5e-6``.
``size_bytes`` is floored at 4096 bytes (one page) and ``lifetime_s`` at 1 ms so that
empty or instantly-deleted files have a finite density.

Models and history work on ``log10(io_density)``. A file never read or written has density
0, whose log is ``-inf``: one such file would make every mean over its stage infinite (and
a model trained on those means learns nothing). Log densities are therefore floored at
``LOG_DENSITY_FLOOR = -20`` (:func:`log_io_density`), so a file without I/O ranks last
without breaking the sums. A file with I/O reaches the floor only beyond about one
operation on a 1 TiB file over three years (``1e-20``), and then ties with it. Costs use
the operations themselves, so a floored file still costs nothing on either tier.

The schema is versioned (``SCHEMA_VERSION``, stored in the Parquet metadata under
``dataplane.placement.schema_version``); readers refuse tables of a newer version and
read older ones, with the columns they lack as nulls. Version 2 added the spill
facts ``reuse_distance`` and ``n_dependents``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from placement.errors import SchemaError

SCHEMA_VERSION = 2
SCHEMA_VERSION_KEY = b"dataplane.placement.schema_version"

#: ``pipeline`` and ``run_id`` of a file created while no run context was set (a cluster
#: whose client never called :func:`placement.storage.set_run_context`).
UNLABELLED = "unknown"

#: Lower bounds used in the density formula (see module docstring).
MIN_SIZE_BYTES = 4096
MIN_LIFETIME_S = 1e-3
#: Least log10 density (operations per byte per second): that of files without I/O.
LOG_DENSITY_FLOOR = -20.0

ID_FIELDS = [
    pa.field("file_id", pa.string(), nullable=False),  # unique per file
    pa.field("pipeline", pa.string(), nullable=False),  # workload / pipeline name
    pa.field("run_id", pa.string(), nullable=False),  # one execution of the pipeline
    pa.field("stage", pa.string(), nullable=False),  # task prefix / operator stage
    pa.field("job_id", pa.string()),  # job or graph id within the run
    pa.field("worker", pa.string()),  # worker address or name
    pa.field("host", pa.string()),
]

CREATION_FIELDS = [
    pa.field("created_at", pa.float64(), nullable=False),  # seconds since the Unix epoch
    # spill | shuffle | rechunk | cache_shard | other
    pa.field("file_kind", pa.string(), nullable=False),
    # shuffle | groupby | merge | set_index | rechunk | bag | ...
    pa.field("operator", pa.string()),
    pa.field("expected_size_bytes", pa.int64()),  # declared or estimated size at creation, in bytes
    pa.field("n_partitions_in", pa.int32()),
    pa.field("n_partitions_out", pa.int32()),
    pa.field("input_bytes", pa.int64()),  # bytes of the stage's input, when known
    pa.field("priority", pa.int32()),  # task priority (lower runs first in Dask)
    pa.field("memory_pressure", pa.float32()),  # worker managed memory / memory limit at creation
    pa.field("n_workers", pa.int32()),
    # spill files: graph-order positions from the running task to the key's next dependent
    pa.field("reuse_distance", pa.int32()),
    pa.field("n_dependents", pa.int32()),  # spill files: dependents of the key still to run
]

OUTCOME_FIELDS = [
    pa.field("deleted_at", pa.float64(), nullable=False),  # seconds since the Unix epoch
    pa.field("size_bytes", pa.int64(), nullable=False),  # largest size the file reached, in bytes
    pa.field("read_ops", pa.int64(), nullable=False),
    pa.field("write_ops", pa.int64(), nullable=False),
    pa.field("read_bytes", pa.int64(), nullable=False),
    pa.field("write_bytes", pa.int64(), nullable=False),
    pa.field("tier", pa.string()),  # ssd | hdd | none (where the file lived)
]

SCHEMA = pa.schema(
    ID_FIELDS + CREATION_FIELDS + OUTCOME_FIELDS,
    metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()},
)

ID_COLUMNS = tuple(f.name for f in ID_FIELDS)
CREATION_COLUMNS = tuple(f.name for f in CREATION_FIELDS)
OUTCOME_COLUMNS = tuple(f.name for f in OUTCOME_FIELDS)
REQUIRED_COLUMNS = tuple(f.name for f in SCHEMA if not f.nullable)


def io_density(
    read_ops: np.ndarray, write_ops: np.ndarray, size_bytes: np.ndarray, lifetime_s: np.ndarray
) -> np.ndarray:
    """I/O density in operations per byte per second (see the module docstring).

    Parameters
    ----------
    read_ops, write_ops : array of int
        Operations over the file's life.
    size_bytes : array of int
        Largest size of the file, in bytes (floored at ``MIN_SIZE_BYTES``).
    lifetime_s : array of float
        Seconds from creation to deletion (floored at ``MIN_LIFETIME_S``).
    """
    ops = np.asarray(read_ops, dtype=np.float64) + np.asarray(write_ops, dtype=np.float64)
    size = np.maximum(np.asarray(size_bytes, dtype=np.float64), MIN_SIZE_BYTES)
    life = np.maximum(np.asarray(lifetime_s, dtype=np.float64), MIN_LIFETIME_S)
    return ops / (size * life)


def log_io_density(
    read_ops: np.ndarray, write_ops: np.ndarray, size_bytes: np.ndarray, lifetime_s: np.ndarray
) -> np.ndarray:
    """log10 of :func:`io_density`, floored at :data:`LOG_DENSITY_FLOOR` (files without I/O;
    see the module docstring). NaN inputs give NaN.

    Parameters
    ----------
    read_ops, write_ops, size_bytes, lifetime_s : array
        As for :func:`io_density` (operations, bytes, seconds).
    """
    density = io_density(read_ops, write_ops, size_bytes, lifetime_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.maximum(np.log10(density), LOG_DENSITY_FLOOR)  # NaN stays NaN


def with_derived(table: pa.Table) -> pa.Table:
    """Return ``table`` with ``lifetime_s`` (seconds) and ``io_density`` columns appended."""
    life = np.asarray(table["deleted_at"], dtype=np.float64) - np.asarray(
        table["created_at"], dtype=np.float64
    )
    dens = io_density(
        table["read_ops"].to_numpy(),
        table["write_ops"].to_numpy(),
        table["size_bytes"].to_numpy(),
        life,
    )
    for name, values in (("lifetime_s", life), ("io_density", dens)):
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, pa.array(values, pa.float64()))
    return table


def _declared_version(value: bytes | None) -> int | None:
    """The schema version a table's metadata declares (``None`` if it declares none).

    Raises
    ------
    SchemaError
        If the metadata value is not a whole number.
    """
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SchemaError(
            f"log metadata {SCHEMA_VERSION_KEY.decode()!r} is {value!r}, not a schema version "
            "number; rewrite the file with that key set to the whole number of the version "
            f"its columns follow (such as {str(SCHEMA_VERSION).encode()!r}), or without it"
        ) from None


def conform(table: pa.Table) -> pa.Table:
    """Check ``table`` against :data:`SCHEMA` and cast it to the schema's types.

    Missing nullable columns are added as nulls; extra columns are dropped. Nulls in a
    required column are kept: readers count and drop such rows
    (:func:`placement.features.clean_table`), so a partly bad log is reported, not refused.

    Raises
    ------
    SchemaError
        If a required column is missing, a column cannot be cast, or the table
        declares a newer schema version than this code reads or a version that is not a
        number.
    """
    meta = table.schema.metadata or {}
    version = _declared_version(meta.get(SCHEMA_VERSION_KEY))
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaError(
            f"log schema version {version} is newer than this dataplane reads "
            f"({SCHEMA_VERSION}); upgrade dataplane to read it"
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise SchemaError(
            f"log table lacks required column(s) {missing}; "
            f"placement logs need {list(REQUIRED_COLUMNS)}"
        )
    columns = []
    for field in SCHEMA:
        if field.name in table.column_names:
            try:
                columns.append(table[field.name].cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(
                    f"log column {field.name!r} has type {table[field.name].type}, "
                    f"which does not convert to {field.type}: {exc}"
                ) from exc
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def empty_table() -> pa.Table:
    """A table with no rows and the log schema."""
    return SCHEMA.empty_table()
