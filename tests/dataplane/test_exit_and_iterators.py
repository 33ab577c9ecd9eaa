"""Interpreter exit with a pass still running, and the one-live-iterator rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dataplane
from dataplane import Loader

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


def tiny_folder(root: Path, per_class: int = 6, side: int = 8) -> Path:
    """An image folder of two classes of small grayscale PNGs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (side, side), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


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
