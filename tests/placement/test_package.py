"""The package face: its public names, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import placement


def test_every_public_name_resolves_to_its_module() -> None:
    from placement import errors, model, simulator

    assert placement.DensityModel is model.DensityModel
    assert placement.simulate is simulator.simulate
    assert placement.PlacementError is errors.PlacementError
    for name in placement.__all__:
        assert getattr(placement, name) is not None
    assert set(placement.__all__) <= set(dir(placement))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        placement.nothing_here  # noqa: B018


def test_importing_the_package_imports_no_heavy_module() -> None:
    code = (
        "import sys, placement; "
        "print(sorted(m for m in ('pandas', 'pyarrow', 'scipy', 'lightgbm', 'placement.model') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_text_table_aligns_text_left_and_numbers_right() -> None:
    from placement.text import text_table

    rows = [["ssd", "spill", 3], ["hdd", "shuffle", 40]]
    lines = text_table(["tier", "kind", "files"], rows, left=2).splitlines()
    assert lines[0].split() == ["tier", "kind", "files"] and set(lines[1]) == {"-", " "}
    assert lines[2].startswith("ssd") and lines[2].endswith(" 3")
    assert lines[3].index("shuffle") == lines[0].index("kind")
    # cells are printed as given: "007" stays "007"
    assert "007" in text_table(["id"], [["007"]])


def test_bad_service_arguments_raise_service_errors() -> None:
    from placement.errors import PlacementTypeError
    from placement.service import ServiceConfigError, ServiceError
    from placement.service.demo import PipelineSpec
    from placement.service.lease import LeasedChooser
    from placement.service.predictor import Predictor

    with pytest.raises(ServiceError, match="version=-1 must be an int >= 0") as info:
        Predictor(version=-1)
    assert isinstance(info.value, ServiceConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(ServiceError, match="unknown_size_bytes=-1 must be an int >= 0"):
        LeasedChooser(unknown_size_bytes=-1)
    with pytest.raises(ServiceError, match="PipelineSpec rows=0 must be a positive int"):
        PipelineSpec(rows=0)
    with pytest.raises(PlacementTypeError, match="models must be a ModelSet or None") as type_info:
        Predictor(models="x")  # type: ignore[arg-type]
    assert isinstance(type_info.value, TypeError)
