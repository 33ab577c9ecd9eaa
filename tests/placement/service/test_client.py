"""The client helpers, against a real in-process scheduler: what they send to the placement
service, how its answers and refusals come back, and what they raise where it is missing."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, Scheduler

from placement.errors import ModelError
from placement.service import ServiceUnavailable, decide, reload_model, service_state
from tests.placement.service.test_scheduler_plugin import on_a_scheduler, plugin_with_service


def facts(size: int) -> dict[str, Any]:
    return {"file_kind": "shuffle", "created_at": 0.0, "expected_size_bytes": size}


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("placement_state", lambda client: service_state(client)),
        ("placement_reload_model", lambda client: reload_model(client, "/models/m")),
        ("placement_decide", lambda client: decide(client, [facts(1024)])),
    ],
    ids=["state", "reload", "decide"],
)
def test_a_scheduler_without_the_service_makes_each_helper_say_how_to_start_it(
    op: str, call: Callable[[Client], Awaitable[Any]]
) -> None:
    async def check(scheduler: Scheduler, client: Client) -> None:
        with pytest.raises(ServiceUnavailable) as info:
            await call(client)
        assert str(info.value) == (
            f"the scheduler at {scheduler.address} runs no placement service (it has no "
            f"'{op}' handler): start it with `dask scheduler --preload placement.dask` (or "
            "`dataplane serve`); if it was started so, the service failed to start there: "
            "see the scheduler's log for why"
        )

    on_a_scheduler([], check)


def test_decisions_are_answered_one_per_request_and_booked_to_the_named_worker() -> None:
    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        named = await decide(client, [facts(1024), facts(2048)], worker="etl")
        unnamed = await decide(client, [facts(1024)])
        empty = await decide(client, [])  # an empty answer is an answer, not a missing service
        state = await service_state(client)
        return {"named": named, "unnamed": unnamed, "empty": empty, "state": state}

    out = on_a_scheduler([plugin_with_service()], check)
    assert [a["tier"] for a in out["named"]] == ["ssd", "ssd"]
    assert [a["tier"] for a in out["unnamed"]] == ["ssd"] and list(out["empty"]) == []
    decisions = {w: rec["service_decisions"] for w, rec in out["state"]["workers"].items()}
    assert decisions == {"etl": {"ssd": 2, "hdd": 0}, "client": {"ssd": 1, "hdd": 0}}


def test_an_asynchronous_decide_sends_the_requests_as_they_were_when_it_was_called() -> None:
    sizes = [1024, 4096, 16384]

    async def check(scheduler: Scheduler, client: Client) -> list[Any]:
        request = facts(0)
        pending = []
        for size in sizes:
            request["expected_size_bytes"] = size  # one dict, reused for every call
            pending.append(decide(client, [request]))
        return await asyncio.gather(*pending)

    answers = on_a_scheduler([plugin_with_service()], check)
    # without a model, a file's log density is -log10 of its size
    assert [a["log_density"] for (a,) in answers] == pytest.approx(
        [-math.log10(size) for size in sizes]
    )


def test_a_refused_reload_raises_the_schedulers_reason_as_a_model_error(tmp_path: Path) -> None:
    async def check(scheduler: Scheduler, client: Client) -> None:
        with pytest.raises(ModelError, match=r"no model directory") as info:
            await reload_model(client, tmp_path / "missing")
        assert not isinstance(info.value, ServiceUnavailable)
        assert str(tmp_path / "missing") in str(info.value)

    on_a_scheduler([plugin_with_service()], check)


def test_a_reload_without_a_path_loads_the_configured_model_again(model_dir: Path) -> None:
    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        return dict(await reload_model(client))

    plugin = plugin_with_service(model_path=str(model_dir))
    assert plugin.service is not None and plugin.service.wait_for_history(30)
    reloaded = on_a_scheduler([plugin], check)
    assert reloaded["version"] == 2 and reloaded["kind"] == "lightgbm"


def test_a_relative_path_that_exists_here_is_sent_as_an_absolute_one(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path is resolved against the client's working directory at the call, so the
    scheduler, reading from another directory, still finds the model."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "model").symlink_to(model_dir)

    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        monkeypatch.chdir(here)
        pending = reload_model(client, "model")
        monkeypatch.chdir(elsewhere)  # where the scheduler reads the path
        return dict(await pending)

    assert on_a_scheduler([plugin_with_service()], check)["version"] == 1


def test_a_relative_path_that_does_not_exist_here_is_left_for_the_scheduler_to_read(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, scheduler_dir = tmp_path / "here", tmp_path / "scheduler"
    here.mkdir()
    scheduler_dir.mkdir()
    (scheduler_dir / "model").symlink_to(model_dir)

    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        monkeypatch.chdir(here)
        pending = reload_model(client, Path("model"))
        monkeypatch.chdir(scheduler_dir)  # where the scheduler reads the path
        return dict(await pending)

    assert on_a_scheduler([plugin_with_service()], check)["version"] == 1


def test_an_absolute_path_is_sent_as_given_so_dot_dot_follows_symlinks(
    model_dir: Path, tmp_path: Path
) -> None:
    """``link/../m`` is ``m`` beside the link's target, not beside the link: the path is
    not normalised on the client, where that would name another directory."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "m").symlink_to(model_dir)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    path = f"{tmp_path}/link/../m"
    assert Path(path).is_dir() and not (tmp_path / "m").exists()

    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        return dict(await reload_model(client, path))

    assert on_a_scheduler([plugin_with_service()], check)["version"] == 1


def test_a_relative_path_through_a_symlink_and_dot_dot_names_the_directory_it_names_here(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made absolute by text, ``link/../m`` would lose the link and name ``m`` beside it,
    which does not exist; resolved, it names ``m`` beside the link's target."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "m").symlink_to(model_dir)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(tmp_path)
    assert Path("link/../m").is_dir() and not Path("m").exists()

    async def check(scheduler: Scheduler, client: Client) -> dict[str, Any]:
        return dict(await reload_model(client, "link/../m"))

    assert on_a_scheduler([plugin_with_service()], check)["version"] == 1
