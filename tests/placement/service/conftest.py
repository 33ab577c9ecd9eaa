"""Fixtures shared by the placement service's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from placement.model import ModelParams, ModelSet
from placement.storage import TieredFileStore
from tests.placement.logtables import make_log


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TieredFileStore]:
    """A tiered store over two folders of ``tmp_path``, closed after the test."""
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as s:
        yield s


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A global model of 20 trees fitted on a synthetic log, saved as a model directory."""
    models = ModelSet.fit(
        make_log(seed=3), per_workload=False, params=ModelParams(n_estimators=20, num_threads=1)
    )
    return models.save(tmp_path_factory.mktemp("model") / "m")
