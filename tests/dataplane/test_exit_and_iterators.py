"""Interpreter exit with a pass still running, the one-live-iterator rule, and when a pass
advances the epoch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dataplane
from dataplane import ConfigError, Loader
from tests.dataplane.helpers import tiny_folder

#: Exits while an iterator is live: the producer thread waits on its full queue,
#: holding the pipeline a previous complete pass left for reuse.
EXIT_SCRIPT = """
import sys
from dataplane import Loader
loader = Loader(sys.argv[1], batch_size=2, recipe="train", device="cpu", num_threads=2)
list(loader)
it = iter(loader)
next(it)
print("exiting")
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return tiny_folder(tmp_path / "tiny")


def test_exit_with_a_live_iterator_is_clean(tiny: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(dataplane.__file__).parents[1])}
    for _ in range(5):  # the failure was intermittent (about one run in two)
        result = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, str(tiny)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert "exiting" in result.stdout
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        assert "terminate called" not in result.stderr, result.stderr[-2000:]


def loader_of(data: Path, **kwargs) -> Loader:  # type: ignore[no-untyped-def]
    kwargs.setdefault("batch_size", 4)
    return Loader(data, recipe="eval", device="cpu", num_threads=1, **kwargs)


def test_a_superseded_iterator_raises_instead_of_ending(tiny: Path) -> None:
    loader = loader_of(tiny)
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match=r"new iter\(loader\).*one live iterator"):
        next(first)
    assert sum(1 for _ in second) == len(loader), "the new pass is complete"
    with pytest.raises(RuntimeError, match="one live iterator"):
        sum(1 for _ in zip(loader, loader, strict=True))


def test_set_epoch_inside_the_loop_is_reported(tiny: Path) -> None:
    loader = loader_of(tiny)
    with pytest.raises(RuntimeError, match=r"set_epoch\(\)"):
        for _ in loader:
            loader.set_epoch(1)


def test_usual_patterns_still_work(tiny: Path) -> None:
    loader = loader_of(tiny)
    n = len(loader)
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert sum(1 for _ in loader) == n
    next(iter(loader))  # a peek, then a full pass
    assert sum(1 for _ in loader) == n
    for i, _ in enumerate(loader):  # an early stop, then a full pass
        if i == 1:
            break
    assert sum(1 for _ in loader) == n
    it = iter(loader)
    next(it)
    it.close()  # closed by the user: ends quietly
    with pytest.raises(StopIteration):
        next(it)
    live = iter(loader)
    next(live)
    loader.close()  # the loader closed: its iterator ends quietly
    with pytest.raises(StopIteration):
        next(live)
    assert sum(1 for _ in loader) == n
    exhausted = iter(loader)
    assert sum(1 for _ in exhausted) == n
    iter(loader).close()
    with pytest.raises(StopIteration):
        next(exhausted)


def indexed(data: Path) -> list[tuple[str, int]]:
    """``(path, label)`` of every image of ``data``, the label being its index: the labels of a
    batch name the samples served."""
    return [(str(p), i) for i, p in enumerate(sorted(data.rglob("*.png")))]


def shuffled(data: Path, **kwargs) -> Loader:  # type: ignore[no-untyped-def]
    kwargs.setdefault("batch_size", 3)
    return loader_of(indexed(data), shuffle=True, seed=0, **kwargs)


def labels_of(batches) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [y.tolist() for _, y in batches]


def epoch_orders(data: Path, epochs: int, **kwargs) -> list[list[list[int]]]:  # type: ignore[no-untyped-def]
    """The batches (as labels) of epochs 0..epochs-1, each chosen with set_epoch."""
    reference = shuffled(data, **kwargs)
    out = []
    for epoch in range(epochs):
        reference.set_epoch(epoch)
        out.append(labels_of(reference))
    return out


def test_a_pass_left_with_break_is_followed_by_the_next_epoch(tiny: Path) -> None:
    orders = epoch_orders(tiny, 4)
    assert len({str(order) for order in orders}) == 4, "a new order every epoch"
    loader = shuffled(tiny)
    for epoch in range(3):  # a torch pattern: cap the steps per epoch, no set_epoch
        assert loader.epoch == epoch
        for step, (_, labels) in enumerate(loader):
            assert labels.tolist() == orders[epoch][step]
            if step == 1:
                break
        assert loader.epoch == epoch + 1, "the next iter() starts the next epoch"
        assert (loader.state_dict()["epoch"], loader.state_dict()["batches_done"]) == (epoch, 2)
    first = next(iter(loader))  # a peek is a pass left unfinished too
    assert first[1].tolist() == orders[3][0]
    assert loader.epoch == 4
    loader.set_epoch(3)
    assert labels_of(loader) == orders[3], "a complete pass after set_epoch"
    assert loader.epoch == 4


def test_zip_of_two_loaders_gives_both_a_new_epoch_each_round(tiny: Path) -> None:
    orders = epoch_orders(tiny, 3)
    a, b = shuffled(tiny), shuffled(tiny)
    for epoch in range(3):
        # zip stops on a's StopIteration and never asks b again: b's pass is left unfinished
        pairs = [(ya.tolist(), yb.tolist()) for (_, ya), (_, yb) in zip(a, b, strict=False)]
        assert [yb for _, yb in pairs] == orders[epoch], f"b serves epoch {epoch}"
        assert [ya for ya, _ in pairs] == orders[epoch]
        assert (a.epoch, b.epoch) == (epoch + 1, epoch + 1)


def test_set_epoch_or_load_state_dict_after_a_break_choose_the_next_pass(tiny: Path) -> None:
    orders = epoch_orders(tiny, 2)
    loader = shuffled(tiny)
    it = iter(loader)
    next(it)
    next(it)
    state = loader.state_dict()
    del it
    assert loader.epoch == 1, "without set_epoch the next pass would be epoch 1"
    loader.set_epoch(0)
    assert loader.epoch == 0
    assert labels_of(loader) == orders[0], "set_epoch(0) after a break: epoch 0 again"
    for _, labels in loader:  # epoch 1, left after one batch
        assert labels.tolist() == orders[1][0]
        break
    loader.load_state_dict(state)
    assert loader.epoch == 0
    assert labels_of(loader) == orders[0][2:], "the rest of the saved pass"
    assert loader.epoch == 1
    assert labels_of(loader) == orders[1]


def test_a_pass_that_yielded_nothing_does_not_advance_the_epoch(tiny: Path) -> None:
    orders = epoch_orders(tiny, 2)
    loader = shuffled(tiny)
    iter(loader).close()
    iter(loader)
    assert loader.epoch == 0
    started = iter(loader)  # supersedes a pass that yielded nothing
    next(started)
    iter(loader)  # supersedes a pass that yielded a batch: epoch 1
    iter(loader)  # supersedes a pass of epoch 1 that yielded nothing
    assert loader.epoch == 1
    assert labels_of(loader) == orders[1]


def test_state_dict_after_a_break_resumes_that_pass_elsewhere(tiny: Path) -> None:
    orders = epoch_orders(tiny, 2)
    loader = shuffled(tiny)
    for step, _ in enumerate(loader):
        if step == 0:
            break
    state = loader.state_dict()
    assert (state["epoch"], state["batches_done"], loader.epoch) == (0, 1, 1)
    restored = shuffled(tiny)
    restored.load_state_dict(state)
    assert labels_of(restored) == orders[0][1:], "a restored loader resumes the left pass"
    assert labels_of(loader) == orders[1], "this loader's next pass is the next epoch"


def test_epochs_and_options_accept_numpy_integers(tiny: Path) -> None:
    loader = loader_of(
        indexed(tiny),
        batch_size=np.int64(4),
        shuffle=True,
        seed=np.uint32(5),
        rank=np.int32(1),
        world_size=np.int64(2),
    )
    assert (loader.batch_size, loader.plan.seed, loader.plan.rank) == (4, 5, 1)
    assert type(loader.plan.seed) is int
    loader.set_epoch(np.int64(2))
    assert loader.epoch == 2 and type(loader.epoch) is int
    state = loader.state_dict()
    state["epoch"], state["batches_done"] = np.int64(2), np.int64(1)
    loader.load_state_dict(state)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches_done"]) == (2, 1)
    with pytest.raises(ConfigError, match="epoch"):
        loader.set_epoch(np.float64(1.0))
    with pytest.raises(ConfigError, match="epoch"):
        loader.set_epoch(True)
