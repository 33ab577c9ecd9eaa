"""The worker side of the placement service on real in-process workers and schedulers: the
spill buffer it swaps in (and the mappings it leaves alone), what setting the plugin up
installs and tearing it down undoes, and what a failed setup undoes, on a worker that is
starting and on one already running."""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client, Scheduler, Worker
from distributed.shuffle import _core as p2p_core
from distributed.shuffle._disk import DiskShardsBuffer
from distributed.spill import SpillBuffer

from placement.errors import PlacementTypeError
from placement.logwriter import read_logs
from placement.service import (
    LinkConfig,
    PlacementSchedulerPlugin,
    PlacementService,
    ServiceConfig,
    ServiceError,
    ServiceWorkerPlugin,
    install_tiered_spill,
    worker_link,
    worker_service_state,
)
from placement.service.link import ServiceLink
from placement.storage import (
    FileRequest,
    FixedTier,
    StorageError,
    TieredSpillBuffer,
    WorkerStorage,
    tiered_spill_buffer,
    worker_storage,
)
from placement.storage.worker import PLUGIN_NAME
from placement.tier import Tier
from tests.placement.inprocess import started_worker
from tests.placement.waiting import until

MiB = 2**20
LOGGER = "placement.service.worker_plugin"


def dirs(tmp_path: Path) -> dict[str, str]:
    return {
        "ssd_dir": str(tmp_path / "ssd"),
        "hdd_dir": str(tmp_path / "hdd"),
        "log_dir": str(tmp_path / "logs"),
    }


def left_in_tiers(tmp_path: Path) -> list[Path]:
    """What the tier directories hold: store directories and their lock files."""
    tiers = [tmp_path / "ssd", tmp_path / "hdd"]
    return [p for tier in tiers if tier.is_dir() for p in tier.iterdir()]


def request() -> FileRequest:
    return FileRequest(file_kind="spill", created_at=time.time())


@asynccontextmanager
async def service_scheduler() -> AsyncIterator[Scheduler]:
    """A started in-process scheduler running the placement service (1 MiB of SSD)."""
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))
    async with Scheduler(port=0, dashboard=False, dashboard_address=None, plugins=[plugin]) as s:
        yield s


def close_data(worker: Worker) -> None:
    """Close a tiered buffer the worker was left with (a worker does not close its data)."""
    if isinstance(worker.data, TieredSpillBuffer):
        worker.data.close()


@pytest.fixture
def link_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected fault: the link's renewals cannot start, after the storage is attached."""

    def start(self: ServiceLink) -> None:
        raise RuntimeError("renewals cannot start")

    monkeypatch.setattr(ServiceLink, "start", start)


@pytest.fixture
def storage_cannot_attach(monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected fault: the storage fails to attach, after the spill buffer was swapped."""

    def attach(cls: type, worker: Any, options: Any = None) -> WorkerStorage:
        raise StorageError("the storage cannot attach")

    monkeypatch.setattr(WorkerStorage, "attach", classmethod(attach))


# ---------------------------------------------------------------------- install_tiered_spill


def test_dasks_empty_spill_buffer_is_swapped_keeping_its_target_and_limit(tmp_path: Path) -> None:
    """The tiered buffer replaces Dask's everywhere the worker holds it, in the directories
    given, with Dask's target (set when the worker started, under the fraction configured
    then) and the worker's memory limit; installing again returns the same buffer."""

    async def main() -> None:
        async with Scheduler(port=0, dashboard=False, dashboard_address=None) as scheduler:
            with dask.config.set({"distributed.worker.memory.target": 0.3}):
                worker = Worker(
                    scheduler.address,
                    nthreads=1,
                    memory_limit="512MiB",
                    local_directory=str(tmp_path / "local"),
                )
            async with worker:
                dasks = worker.data
                assert isinstance(dasks, SpillBuffer)
                buffer = install_tiered_spill(worker, **dirs(tmp_path))
                try:
                    assert isinstance(buffer, TieredSpillBuffer)
                    assert worker.data is buffer and worker.memory_manager.data is buffer
                    assert worker.state.data is buffer
                    assert buffer.n == dasks.n == int(512 * MiB * 0.3)
                    assert buffer.memory_limit == 512 * MiB
                    assert buffer.store.roots[Tier.SSD].parent == tmp_path / "ssd"
                    assert buffer.store.roots[Tier.HDD].parent == tmp_path / "hdd"
                    with warnings.catch_warnings():
                        warnings.simplefilter("error")
                        assert install_tiered_spill(worker, **dirs(tmp_path)) is buffer
                finally:
                    buffer.close()

    asyncio.run(main())


def test_a_worker_holding_a_key_keeps_dasks_buffer_and_the_key_with_a_warning(
    tmp_path: Path,
) -> None:
    """Swapping a buffer that holds data would lose it: the worker keeps Dask's buffer."""

    async def main() -> None:
        async with (
            Scheduler(port=0, dashboard=False, dashboard_address=None) as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            held = client.submit(sum, [1, 2, 3])
            assert await held == 6
            dasks = w.data
            with pytest.warns(
                RuntimeWarning, match=r"its data mapping \(SpillBuffer, 1 keys\) cannot be"
            ):
                assert install_tiered_spill(w, **dirs(tmp_path)) is None
            assert w.data is dasks and w.data[held.key] == 6
            assert left_in_tiers(tmp_path) == []

    asyncio.run(main())


def test_a_mapping_of_another_kind_is_kept_with_a_warning(tmp_path: Path) -> None:
    """A worker built with a mapping of its own (even an empty one) keeps it."""

    async def main() -> None:
        async with started_worker(
            data=collections.OrderedDict(), local_directory=str(tmp_path / "local")
        ) as worker:
            with pytest.warns(RuntimeWarning, match=r"\(OrderedDict, 0 keys\) cannot be replaced"):
                assert install_tiered_spill(worker, **dirs(tmp_path)) is None
            assert type(worker.data) is collections.OrderedDict

    asyncio.run(main())


def test_the_plain_dict_of_a_worker_without_a_memory_limit_is_swapped(tmp_path: Path) -> None:
    """Without a memory limit Dask's worker holds a plain ``dict``; it is swapped as well."""

    async def main() -> None:
        local = str(tmp_path / "local")
        async with started_worker(memory_limit=0, local_directory=local) as worker:
            assert type(worker.data) is dict
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                buffer = install_tiered_spill(worker, **dirs(tmp_path))
            try:
                assert isinstance(buffer, TieredSpillBuffer) and worker.data is buffer
                assert worker.state.data is buffer
            finally:
                buffer.close()

    asyncio.run(main())


# ---------------------------------------------------------------------- the plugin's options


def test_the_plugin_refuses_a_fallback_without_choose_and_a_link_that_is_no_link_config() -> None:
    with pytest.raises(PlacementTypeError, match="fallback=.* has no choose"):
        ServiceWorkerPlugin(fallback=object())  # type: ignore[arg-type]
    with pytest.raises(PlacementTypeError, match="link must be a LinkConfig, got dict"):
        ServiceWorkerPlugin(link={"sync_interval_s": 1})  # type: ignore[arg-type]


def test_files_decided_without_a_lease_go_to_hdd_by_default() -> None:
    assert ServiceWorkerPlugin().fallback.choose(request()) is Tier.HDD


# ---------------------------------------------------------------------- setup and teardown


def test_setup_places_the_workers_files_under_leases_until_teardown(tmp_path: Path) -> None:
    """Setup swaps in a tiered spill buffer in the directories given, whose store decides
    with a leased chooser built from the plugin's settings; the link renews leases and the
    log is flushed at the interval given. A copy of the set-up plugin carries neither
    storage nor link. Teardown stops the link, stops routing P2P files and keeps the
    buffer (a running worker may still hold spilled keys)."""
    fallback = FixedTier(Tier.SSD)
    link_config = LinkConfig(sync_interval_s="50ms", unknown_size_bytes="3MiB")
    plugin = ServiceWorkerPlugin(
        **dirs(tmp_path), fallback=fallback, link=link_config, flush_interval_s=7
    )

    async def main() -> None:
        async with (
            service_scheduler() as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
        ):
            try:
                assert await w.plugin_add(plugin, catch_errors=False) == {"status": "OK"}
                buffer = w.data
                assert isinstance(buffer, TieredSpillBuffer)
                assert buffer.store.roots[Tier.SSD].parent == tmp_path / "ssd"
                assert buffer.store.roots[Tier.HDD].parent == tmp_path / "hdd"
                link = worker_link(w)
                assert link is plugin.link and link.config == link_config
                assert buffer.store.chooser is link.chooser
                assert link.chooser.fallback is fallback
                assert link.chooser.unknown_size_bytes == 3 * MiB
                assert w.periodic_callbacks["placement-log-flush"].callback_time == 7000
                await until(lambda: worker_service_state(w)["syncs"] >= 1, "a renewal")
                assert worker_service_state(w)["address"] == w.address
                store = worker_storage(w).store
                store.delete(store.create("logged", request()))
                assert worker_storage(w).flush()["rows_written"] == 1

                copied = copy.copy(plugin)
                assert copied.storage is None and copied.link is None
                assert plugin.storage is not None and plugin.link is link

                await w.plugin_remove(PLUGIN_NAME)
                assert plugin.link is None and plugin.storage is None
                assert p2p_core.DiskShardsBuffer is DiskShardsBuffer
                assert w.data is buffer and not buffer.store.closed
            finally:
                close_data(w)

    asyncio.run(main())
    assert read_logs(tmp_path / "logs").table.num_rows == 1


def test_without_swap_spill_dasks_buffer_stays_and_the_storage_has_its_own_store(
    tmp_path: Path,
) -> None:
    """P2P files only: the storage's own store, in the directories given, decides under
    leases."""
    plugin = ServiceWorkerPlugin(**dirs(tmp_path), swap_spill=False)

    async def main() -> None:
        async with (
            service_scheduler() as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
        ):
            await w.plugin_add(plugin, catch_errors=False)
            try:
                assert isinstance(w.data, SpillBuffer)
                store = worker_storage(w).store
                assert store.chooser is worker_link(w).chooser
                assert store.roots[Tier.SSD].parent == tmp_path / "ssd"
            finally:
                await w.plugin_remove(PLUGIN_NAME)

    asyncio.run(main())
    assert left_in_tiers(tmp_path) == []


# ---------------------------------------------------------------------- failed setup


@pytest.mark.usefixtures("link_cannot_start")
def test_a_worker_whose_setup_fails_does_not_start_and_leaves_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error fails the worker's start; one error line names the worker and the cause;
    the link is stopped and the store the setup made is closed: its directories and lock
    files go."""
    plugin = ServiceWorkerPlugin(**dirs(tmp_path))

    async def main() -> str:
        async with service_scheduler() as scheduler:
            worker = Worker(
                scheduler.address,
                nthreads=1,
                local_directory=str(tmp_path / "local"),
                plugins=[plugin],
            )
            try:
                with caplog.at_level(logging.ERROR, logger=LOGGER):
                    with pytest.raises(RuntimeError, match="Worker failed to start"):
                        await worker
            finally:
                await worker.close()
            return str(worker.address)

    address = asyncio.run(main())
    assert plugin.link is None and plugin.storage is None
    assert left_in_tiers(tmp_path) == []
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"placement storage on worker {address} not started: renewals cannot start"
    )


@pytest.mark.usefixtures("link_cannot_start")
def test_a_failed_setup_on_a_running_worker_keeps_its_spill_buffer(tmp_path: Path) -> None:
    """On a running worker the swapped buffer (which may hold keys by now) stays open; the
    worker runs no placement service, and says so."""
    plugin = ServiceWorkerPlugin(**dirs(tmp_path))

    async def main() -> None:
        async with (
            service_scheduler() as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
        ):
            try:
                answer = await w.plugin_add(plugin)
                assert answer["status"] == "error"
                assert plugin.link is None and plugin.storage is None
                assert isinstance(w.data, TieredSpillBuffer) and not w.data.store.closed
                with pytest.raises(ServiceError, match="runs no placement service"):
                    worker_service_state(w)
            finally:
                close_data(w)

    asyncio.run(main())


@pytest.mark.usefixtures("storage_cannot_attach")
def test_a_setup_failing_before_the_storage_closes_only_the_buffer_it_made(
    tmp_path: Path,
) -> None:
    """A worker starting with Dask's buffer: the buffer the setup swapped in is closed (its
    directories go). A worker starting with a tiered buffer of its own: that buffer stays
    its owner's, open."""

    async def main() -> TieredSpillBuffer:
        async with service_scheduler() as scheduler:
            swapped = Worker(
                scheduler.address,
                nthreads=1,
                local_directory=str(tmp_path / "swapped"),
                plugins=[ServiceWorkerPlugin(**dirs(tmp_path / "swapped"))],
            )
            try:
                with pytest.raises(RuntimeError, match="Worker failed to start"):
                    await swapped
            finally:
                await swapped.close()
            assert isinstance(swapped.data, TieredSpillBuffer) and swapped.data.store.closed
            own = tiered_spill_buffer(str(tmp_path / "own"), **dirs(tmp_path / "own"))
            given = Worker(
                scheduler.address,
                nthreads=1,
                data=own,
                local_directory=str(tmp_path / "given"),
                plugins=[ServiceWorkerPlugin(**dirs(tmp_path / "given"))],
            )
            try:
                with pytest.raises(RuntimeError, match="Worker failed to start"):
                    await given
            finally:
                await given.close()
            assert given.data is own
            return own

    own = asyncio.run(main())
    try:
        assert left_in_tiers(tmp_path / "swapped") == []
        assert not own.store.closed and left_in_tiers(tmp_path / "own") != []
    finally:
        own.close()


@pytest.mark.usefixtures("storage_cannot_attach")
def test_a_setup_failing_before_the_storage_on_a_running_worker_keeps_the_buffer(
    tmp_path: Path,
) -> None:
    plugin = ServiceWorkerPlugin(**dirs(tmp_path))

    async def main() -> None:
        async with (
            service_scheduler() as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
        ):
            try:
                with pytest.raises(StorageError, match="the storage cannot attach"):
                    await w.plugin_add(plugin, catch_errors=False)
                assert isinstance(w.data, TieredSpillBuffer) and not w.data.store.closed
            finally:
                close_data(w)

    asyncio.run(main())


@pytest.mark.usefixtures("link_cannot_start")
def test_an_undo_that_fails_is_logged_and_the_setup_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Undoing is best effort: its own failure is logged, and the error that stopped the
    setup is the one raised."""
    plugin = ServiceWorkerPlugin(**dirs(tmp_path))
    real_close = WorkerStorage.close

    def close(self: WorkerStorage, *, worker_closing: bool = False) -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        async with (
            service_scheduler() as scheduler,
            Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "local")) as w,
        ):
            # injected fault: closing the storage fails too
            monkeypatch.setattr(WorkerStorage, "close", close)
            try:
                with (
                    caplog.at_level(logging.ERROR, logger=LOGGER),
                    pytest.raises(RuntimeError, match="renewals cannot start"),
                ):
                    await w.plugin_add(plugin, catch_errors=False)
            finally:
                monkeypatch.setattr(WorkerStorage, "close", real_close)
                if plugin.storage is not None:
                    plugin.storage.close(worker_closing=True)
                close_data(w)

    asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "undoing a failed placement storage setup failed" in messages
    assert any(m.endswith("not started: renewals cannot start") for m in messages)
