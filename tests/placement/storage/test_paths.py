"""Safe file names below a tier directory: the checks on a name, and the names made from
Dask keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.storage import UnsafePathError
from placement.storage.paths import check_name, name_for_key, resolve_within


def test_a_folder_ending_in_the_partial_suffix_is_refused() -> None:
    with pytest.raises(UnsafePathError, match="reserved for in-progress writes"):
        check_name("run.partial/part-0")
    assert check_name("run.partial-0/part-0") == ("run.partial-0", "part-0")


@pytest.mark.parametrize("name", [b"part-0", None, 3])
def test_a_name_that_is_not_a_string_is_refused(name: object) -> None:
    with pytest.raises(UnsafePathError, match="must be a non-empty string"):
        check_name(name)  # type: ignore[arg-type]


def test_a_safe_name_resolves_below_the_root_component_by_component(tmp_path: Path) -> None:
    assert check_name("shuffle-1/part-3") == ("shuffle-1", "part-3")
    assert resolve_within(tmp_path, "shuffle-1/part-3") == tmp_path / "shuffle-1" / "part-3"


def test_a_key_becomes_a_readable_name_ending_in_its_serial() -> None:
    assert name_for_key(("getitem-ab12", 3), 7) == "__getitem-ab12_,_3_~7"
    assert name_for_key("x=1+2.5", 0) == "x=1+2.5~0"


def test_a_key_name_is_cut_to_max_len_characters_before_its_serial() -> None:
    assert name_for_key("k" * 500, 3) == "k" * 120 + "~3"
    assert name_for_key("k" * 500, 3, max_len=10) == "k" * 10 + "~3"
    assert check_name(name_for_key("k" * 500, 12345)) == ("k" * 120 + "~12345",)


@pytest.mark.parametrize("key", ["", ".", "..", "....", ".." * 100])
def test_a_key_with_nothing_left_after_its_dots_is_named_key(key: str) -> None:
    assert name_for_key(key, 4) == "key~4"
