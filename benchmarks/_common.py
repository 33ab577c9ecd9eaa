"""Small helpers shared by the benchmarks: timing, RSS sampling, machine info, JSON out.

Benchmarks never assert on time; they print ratios measured side by side in one
run (the machines are shared and noisy) and write the numbers as JSON under
``benchmarks/results/``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil
from tabulate import tabulate

from placement.jsonout import dumps

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclasses.dataclass
class EpochTiming:
    """One timed pass: images yielded, wall seconds, peak RSS of this process (bytes)."""

    images: int
    seconds: float
    peak_rss: int

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0


class RssSampler:
    """Samples this process's resident set size in a thread; ``peak`` in bytes.

    Parameters
    ----------
    interval : float
        Seconds between samples.
    include_children : bool
        Add the RSS of child processes (e.g. DataLoader workers).
    """

    def __init__(self, interval: float = 0.02, include_children: bool = False) -> None:
        self.interval = interval
        self.include_children = include_children
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()

    def _rss(self) -> int:
        total = self._proc.memory_info().rss
        if self.include_children:
            for child in self._proc.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
        return int(total)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self._rss())


def time_epochs(
    make_epoch: Callable[[int], Iterable[Any]],
    epochs: int,
    count: Callable[[Any], int],
    *,
    include_children: bool = False,
) -> list[EpochTiming]:
    """Time ``epochs`` passes; ``make_epoch(e)`` returns the iterable of epoch ``e``.

    ``count(batch)`` gives the images in a batch. Each pass is timed from the
    request of its first batch to the end, and its peak RSS is sampled.
    """
    out = []
    for epoch in range(epochs):
        with RssSampler(include_children=include_children) as rss:
            start = time.perf_counter()
            images = 0
            for batch in make_epoch(epoch):
                images += count(batch)
            seconds = time.perf_counter() - start
        out.append(EpochTiming(images, seconds, rss.peak))
    return out


def machine_info() -> dict[str, Any]:
    """Cores, load, memory and library versions, to read the numbers by."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores_available": len(os.sched_getaffinity(0)),
        "load_average_1_5_15": list(os.getloadavg()),
        "memory_total_bytes": psutil.virtual_memory().total,
    }
    for module in ("torch", "nvidia.dali", "numpy", "PIL"):
        try:
            mod = __import__(module, fromlist=["__version__"])
            info[f"{module}_version"] = getattr(mod, "__version__", "?")
        except ImportError:
            info[f"{module}_version"] = None
    return info


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``benchmarks/results/<name>-<UTC time>.json`` (and ``-latest``).

    Strict JSON: a non-finite number (an undefined ratio, say) is written as ``null``.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = dumps(payload, indent=2, default=str)
    path = RESULTS_DIR / f"{name}-{stamp}.json"
    path.write_text(text)
    (RESULTS_DIR / f"{name}-latest.json").write_text(text)
    return path


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left, the others right, as
    :func:`placement.text.text_table` lays them out. (Not imported from there: on a
    benchmark's path ``placement`` is this folder's ``placement.py``.)"""
    align = ("left",) + ("right",) * (len(headers) - 1)
    cells = [[str(c) for c in row] for row in rows]
    return tabulate(
        cells, headers=list(headers), tablefmt="simple", colalign=align, disable_numparse=True
    )


# -- real datasets (installed by `make demo` / `make test` from Debian's packages) -------------
JPEG_DIR = Path(os.environ.get("DATAPLANE_JPEG_DIR", "/usr/share/doc/opencv-doc/examples"))
FMNIST_DIR = Path(os.environ.get("DATAPLANE_FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def jpeg_items(repeat: int) -> list[tuple[str, int]]:
    """The opencv-doc JPEGs as ``(path, label)`` (label: the folder), the list ``repeat`` times."""
    import click

    paths = sorted(p for p in JPEG_DIR.rglob("*.jpg") if p.is_file())
    if not paths:
        raise click.ClickException(f"no JPEGs under {JPEG_DIR} (apt-get install opencv-doc)")
    folders = sorted({p.parent for p in paths})
    label = {f: i for i, f in enumerate(folders)}
    return [(str(p), label[p.parent]) for p in paths] * repeat


def fmnist_folder(limit: int, workdir: Path) -> Path:
    """Ingest the first ``limit`` Fashion-MNIST images as PNG folders; the train folder."""
    from dataplane.ingest import ingest_fmnist

    ingest_fmnist(workdir / "fmnist", limit=limit, source_dir=FMNIST_DIR, progress=False)
    return workdir / "fmnist" / "train"
