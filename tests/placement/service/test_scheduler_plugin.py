"""The scheduler plugin hosting the placement service, on an in-process Dask scheduler:
the ops it serves over the scheduler's comms, its handlers' lifecycle, model reloads and
the arguments it refuses."""

from __future__ import annotations

import asyncio
import pickle
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, Scheduler

from placement.errors import ModelError
from placement.model import ModelSet
from placement.service import (
    PlacementSchedulerPlugin,
    PlacementService,
    ServiceConfig,
    ServiceError,
    decide,
    reload_model,
    service_state,
)
from placement.service.scheduler_plugin import HANDLERS

MiB = 2**20


def plugin_with_service(**config: Any) -> PlacementSchedulerPlugin:
    return PlacementSchedulerPlugin(
        PlacementService(ServiceConfig(ssd_capacity_bytes=MiB, **config))
    )


def on_a_scheduler(
    plugins: list[PlacementSchedulerPlugin], check: Callable[[Scheduler, Client], Awaitable[Any]]
) -> Any:
    """``check(scheduler, client)`` on a started in-process scheduler holding ``plugins``."""

    async def main() -> Any:
        async with (
            Scheduler(port=0, dashboard=False, dashboard_address=None, plugins=plugins) as s,
            Client(s.address, asynchronous=True) as client,
        ):
            return await check(s, client)

    return asyncio.run(main())


def test_a_scheduler_serves_every_op_over_its_comms_until_it_closes(model_dir: Path) -> None:
    plugin = plugin_with_service()
    facts = {"file_kind": "shuffle", "created_at": time.time(), "expected_size_bytes": 1024}

    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        assert {op: scheduler.handlers[op] for op in HANDLERS} == {
            op: getattr(plugin, method) for op, method in HANDLERS.items()
        }
        sync = await client.scheduler.placement_sync(worker="w", used_bytes=0)
        answers = await decide(client, [facts])
        reloaded = await reload_model(client, str(model_dir))
        state = await service_state(client)
        return {"sync": sync, "answers": answers, "reloaded": reloaded, "state": state}

    out = on_a_scheduler([plugin], check)
    assert out["sync"]["allowance"] == MiB // 2
    assert [a["tier"] for a in out["answers"]] == ["ssd"]
    assert out["reloaded"]["version"] == 1 and out["reloaded"]["kind"] == "lightgbm"
    assert "w" in out["state"]["workers"]
    assert plugin.scheduler is not None
    assert not set(HANDLERS) & set(plugin.scheduler.handlers), "closed with its scheduler"


def test_closing_a_plugin_leaves_the_handlers_another_one_installed() -> None:
    first, second = plugin_with_service(), plugin_with_service()

    async def check(scheduler: Scheduler, client: Client) -> None:
        await first.start(scheduler)
        await second.start(scheduler)  # a second service replaces the first one's handlers
        await first.close()
        assert {op: scheduler.handlers.get(op) for op in HANDLERS} == {
            op: getattr(second, method) for op, method in HANDLERS.items()
        }
        await second.close()
        assert not set(HANDLERS) & set(scheduler.handlers)

    on_a_scheduler([], check)


def test_closing_a_plugin_that_never_started_does_nothing() -> None:
    plugin = PlacementSchedulerPlugin()
    asyncio.run(plugin.close())
    assert plugin.scheduler is None and plugin.service is None


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.handle_state(),
        lambda p: p.handle_sync(worker="w", used_bytes=0),
        lambda p: p.handle_decide(worker="w", requests=[]),
        lambda p: p.handle_reload_model("/m"),
    ],
    ids=["state", "sync", "decide", "reload"],
)
def test_a_plugin_that_has_not_started_says_so(
    call: Callable[[PlacementSchedulerPlugin], Awaitable[Any]],
) -> None:
    with pytest.raises(RuntimeError, match="the placement scheduler plugin has not started"):
        asyncio.run(call(PlacementSchedulerPlugin()))  # type: ignore[arg-type]


def test_a_started_plugin_pickles_without_its_scheduler() -> None:
    plugin = plugin_with_service()

    async def check(scheduler: Scheduler, client: Client) -> PlacementSchedulerPlugin:
        await client.scheduler.placement_sync(worker="w", used_bytes=10)
        assert plugin.scheduler is scheduler
        return pickle.loads(pickle.dumps(plugin))

    copy = on_a_scheduler([plugin], check)
    assert copy.scheduler is None and copy.service is not None
    assert copy.service.ledger.share("w").used == 10


def test_an_absolute_model_path_that_fails_is_not_called_relative(tmp_path: Path) -> None:
    plugin = plugin_with_service()
    answer = asyncio.run(plugin.handle_reload_model(str(tmp_path / "missing")))
    assert "no model directory" in answer["refused"]
    assert "relative path" not in answer["refused"] and "working directory" not in answer["refused"]


def test_reloading_the_configured_model_after_it_was_removed_keeps_the_current_one(
    model_dir: Path, tmp_path: Path
) -> None:
    configured = tmp_path / "model"
    shutil.copytree(model_dir, configured)
    plugin = plugin_with_service(model_path=str(configured))
    assert plugin.service is not None and plugin.service.wait_for_history(30)
    shutil.rmtree(configured)
    answer = asyncio.run(plugin.handle_reload_model())
    assert set(answer) == {"refused"} and "no model directory" in answer["refused"]
    assert "relative path" not in answer["refused"]
    assert plugin.service.predictor.version == 1 and plugin.service.predictor.kind == "lightgbm"


def test_a_reload_with_no_model_named_anywhere_is_an_error_not_a_refusal() -> None:
    plugin = plugin_with_service()
    with pytest.raises(ServiceError, match="no model to load") as info:
        asyncio.run(plugin.handle_reload_model())
    assert not isinstance(info.value, ModelError)


def test_a_decision_batch_that_is_not_a_list_is_refused() -> None:
    plugin = plugin_with_service()
    for requests in (None, {"file_kind": "spill"}):
        with pytest.raises(ServiceError, match="requests must be a list"):
            asyncio.run(plugin.handle_decide(worker="w", requests=requests))  # type: ignore[arg-type]


def test_the_plugin_refuses_a_service_or_models_of_the_wrong_type(model_dir: Path) -> None:
    with pytest.raises(TypeError, match="service must be a PlacementService, got str"):
        PlacementSchedulerPlugin("service")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="models must be a ModelSet, given without a service"):
        PlacementSchedulerPlugin(models=str(model_dir))  # type: ignore[arg-type]
    models = ModelSet.load(model_dir)
    assert PlacementSchedulerPlugin(models=models).models is models
