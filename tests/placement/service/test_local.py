"""The embedded cluster's options (``ServeOptions``): what they accept and refuse, the Dask
config they set, and the errors raised before any cluster process starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import pytest

from placement.errors import PlacementError
from placement.local_cluster import WORKER_PRELOAD_KEY
from placement.model import ModelSet
from placement.service import LinkConfig
from placement.service.config import MODEL_KEY, SSD_CAPACITY_KEY
from placement.service.errors import ServiceConfigError
from placement.service.local import (
    PRELOAD,
    SCHEDULER_PRELOAD_KEY,
    ServeOptions,
    _placement_cause,
    service_cluster,
    tight_memory,
)
from placement.storage.config import HDD_DIR_KEY, LOG_DIR_KEY, SSD_DIR_KEY, StorageConfigError


def options(tmp_path: Path, **changes: Any) -> ServeOptions:
    """Valid options over two folders of ``tmp_path``, with ``changes``."""
    given: dict[str, Any] = {
        "ssd_dir": str(tmp_path / "ssd"),
        "hdd_dir": str(tmp_path / "hdd"),
        "ssd_capacity": "64MiB",
        **changes,
    }
    return ServeOptions(**given)


# ----------------------------------------------------------------------------- memory limit


@pytest.mark.parametrize("limit", ["auto", "0.25", "0", "1GiB", 2**30, 0.5, None])
def test_a_memory_limit_dask_reads_is_accepted(tmp_path: Path, limit: str | float | None) -> None:
    """``"auto"``, a fraction and ``"0"``/``None`` (no limit) mean what they mean to Dask."""
    assert options(tmp_path, memory_limit=limit).memory_limit == limit


@pytest.mark.parametrize(
    "limit, says",
    [
        ("lots", "Could not interpret 'lots'"),
        ("", "is not a memory limit"),
        ("-1GiB", "is negative"),
        (True, "is not a memory limit"),
        (["1GiB"], "is not a memory limit"),
        ("nan", "NaN"),
    ],
)
def test_a_memory_limit_dask_cannot_read_is_refused_with_the_forms_it_takes(
    tmp_path: Path, limit: object, says: str
) -> None:
    with pytest.raises(ServiceConfigError) as caught:
        options(tmp_path, memory_limit=limit)
    message = str(caught.value)
    assert message.startswith(f"memory_limit={limit!r}") and says in message
    assert "'2GiB'" in message and "'0.25'" in message and "'auto'" in message


# ----------------------------------------------------------------------------- counts, port


@pytest.mark.parametrize("name", ["n_workers", "threads_per_worker"])
@pytest.mark.parametrize("value", [0, -1, True, 1.0, "2"])
def test_worker_and_thread_counts_must_be_positive_ints(
    tmp_path: Path, name: str, value: object
) -> None:
    """``True`` is an int to Python, not a count."""
    with pytest.raises(ServiceConfigError, match=rf"^{name}={value!r} must be a positive int$"):
        options(tmp_path, **{name: value})


@pytest.mark.parametrize("port", [0, 65535])
def test_scheduler_ports_from_0_to_65535_are_accepted(tmp_path: Path, port: int) -> None:
    assert options(tmp_path, scheduler_port=port).scheduler_port == port


@pytest.mark.parametrize("port", [-1, 65536, True, "8786"])
def test_other_scheduler_ports_are_refused(tmp_path: Path, port: object) -> None:
    with pytest.raises(ServiceConfigError, match=r"must be in \[0, 65535\]"):
        options(tmp_path, scheduler_port=port)


def test_an_ssd_capacity_is_read_as_the_scheduler_reads_it(tmp_path: Path) -> None:
    with pytest.raises(ServiceConfigError, match="ssd_capacity='lots'"):
        options(tmp_path, ssd_capacity="lots")


def test_one_directory_for_both_tiers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServiceConfigError, match="both .*give each tier its own directory"):
        options(tmp_path, hdd_dir=str(tmp_path / "ssd"))


# ----------------------------------------------------------------------------- Dask config


def test_the_config_sets_the_preloads_and_the_placement_keys(tmp_path: Path) -> None:
    """The placement keys win over the same keys given in ``config``."""
    given = options(
        tmp_path,
        log_dir=str(tmp_path / "logs"),
        model=str(tmp_path / "model"),
        config={SSD_DIR_KEY: "/elsewhere", "distributed.worker.memory.target": 0.1},
    )
    config = given.dask_config()
    assert config[SCHEDULER_PRELOAD_KEY] == config[WORKER_PRELOAD_KEY] == [PRELOAD]
    assert config[SSD_DIR_KEY] == given.ssd_dir and config[HDD_DIR_KEY] == given.hdd_dir
    assert config[SSD_CAPACITY_KEY] == "64MiB"
    assert config[LOG_DIR_KEY] == given.log_dir and config[MODEL_KEY] == given.model
    assert config["distributed.worker.memory.target"] == 0.1


def test_the_preload_joins_those_already_set_once(tmp_path: Path) -> None:
    """Preloads from ``config`` or, failing that, from Dask's config are kept, and the
    service's is not added twice."""
    given = options(tmp_path, config={WORKER_PRELOAD_KEY: ["mine", PRELOAD]})
    with dask.config.set({SCHEDULER_PRELOAD_KEY: ["site"]}):
        config = given.dask_config()
    assert config[WORKER_PRELOAD_KEY] == ["mine", PRELOAD]
    assert config[SCHEDULER_PRELOAD_KEY] == ["site", PRELOAD]
    assert given.config[WORKER_PRELOAD_KEY] == ["mine", PRELOAD]  # the options are unchanged


def test_every_link_setting_reaches_the_workers(tmp_path: Path) -> None:
    """The workers read their link from the Dask config: each field makes the round trip."""
    link = LinkConfig(
        sync_interval_s="40ms", sync_timeout_s=2, unknown_size_bytes="1MiB", max_backoff_s=5
    )
    with dask.config.set(options(tmp_path, link=link).dask_config()):
        assert LinkConfig.from_dask_config() == link
    assert not any(key.startswith("placement.service") for key in options(tmp_path).dask_config())


@pytest.mark.parametrize("fraction", [0, 0.7, -0.1])
def test_tight_memory_refuses_a_target_outside_0_to_0_7(fraction: float) -> None:
    with pytest.raises(ServiceConfigError, match=rf"target_fraction={fraction!r}"):
        tight_memory(fraction)


def test_tight_memory_spills_above_its_target() -> None:
    config = tight_memory(0.3)
    assert config["distributed.worker.memory.target"] == 0.3
    assert config["dataframe.shuffle.method"] == "p2p"


# ----------------------------------------------------------------------------- before a start


def test_models_without_their_directory_are_refused_before_a_cluster_starts(
    tmp_path: Path, model_dir: Path
) -> None:
    with (
        pytest.raises(ServiceConfigError, match="models given without options.model"),
        service_cluster(options(tmp_path), models=ModelSet.load(model_dir)),
    ):
        pytest.fail("no cluster starts")


def test_a_tier_that_is_a_file_is_refused_before_a_cluster_starts(tmp_path: Path) -> None:
    (tmp_path / "ssd").write_text("not a directory")
    with (
        pytest.raises(StorageConfigError, match=f"{SSD_DIR_KEY}=.*cannot create"),
        service_cluster(options(tmp_path)),
    ):
        pytest.fail("no cluster starts")


def test_the_placement_error_behind_a_failed_start_is_found_through_causes() -> None:
    """Dask wraps the worker's error; the chain is followed through ``__cause__`` and
    ``__context__``, and a chain that loops ends."""
    ours = ServiceConfigError("placement.ssd-capacity is not set")
    try:
        try:
            raise RuntimeError("Nanny failed to start") from ours
        except RuntimeError:
            raise RuntimeError("Cluster failed to start")  # noqa: B904 - the context is the test
    except RuntimeError as wrapped:
        assert _placement_cause(wrapped) is ours

    looped = RuntimeError("a")
    other = RuntimeError("b")
    looped.__cause__, other.__cause__ = other, looped
    assert _placement_cause(looped) is None
    assert isinstance(ours, PlacementError)
