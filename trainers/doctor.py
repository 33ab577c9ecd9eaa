"""``dataplane doctor``: is training input-bound, and what can caching buy?

The doctor runs a few steps of each stage *alone*:

- the **input stage**: ``next()`` on the training loader (read, decode,
  augment, batch, normalize), ``t_in`` seconds per batch;
- the **compute stage**: forward, backward and optimizer step of the model on
  a synthetic batch already in memory (same shape), ``t_c`` seconds per batch.

``input_share = t_in / (t_in + t_c)`` is the input stage's share of a step
when the two stages take turns on the same cores, which is the case on a CPU
machine where DALI's threads and torch's threads compete for the same few
cores (with a GPU the stages overlap and the step costs ``max(t_in, t_c)``;
the share then still says how much of the work caching removes).

Verdict: ``input-bound`` when ``input_share >= 0.5`` (the input stage is the
larger stage), ``input-significant`` when ``input_share >= 0.1``, else
``compute-bound``.

Amdahl bound. Serving cached augmented samples replaces the input stage's
cost by ``cached_cost_ratio * t_in`` (the cost of reading a cached batch
relative to producing it fresh). The best possible speed-up of a step is::

    bound = 1 / (1 - input_share + input_share * cached_cost_ratio)

and simply ``1 / (1 - input_share)`` when cached input is about free
(``cached_cost_ratio = 0``, the default, which gives the ceiling). Time to
accuracy cannot improve by more than this factor from caching alone.

Cache recommendation. A cached record holds one augmented uint8 sample in
the layout it is served in (``C * H * W`` bytes) plus a small header; the
estimate adds 64 bytes per record and LMDB's page overhead (records larger
than ~2 KB occupy whole 4096-byte overflow pages; smaller ones share leaf
pages that are on average about two-thirds full, counted as x1.5). With
``phase1_epochs = SwitchRule(budget_fraction=phase1_fraction).budget_epochs(epochs)``
(the trainer's own phase-1 budget: ``floor(phase1_fraction * epochs)``, at
least 1 when ``phase1_fraction > 0``), each of the ``K``
variants costs one fresh epoch to fill and is then served
``phase1_epochs / K - 1`` more times; reusing every variant about ``reuse``
times (default 4) keeps the fill to a quarter of phase 1 while giving the
model ``K`` distinct views of each sample. So::

    K = clamp(floor(phase1_epochs / reuse), 1, K_fit)

where ``K_fit`` is the number of variants that fit in ``disk_fraction``
(default half) of the free space of the cache's disk
(:func:`shutil.disk_usage`). The recommended ``max_bytes`` is ``K`` variants
of every sample. ``K_fit = 0`` means not even one variant fits, and
``phase1_epochs = 0`` (``phase1_fraction = 0``) means there is no phase 1
to serve: the doctor then recommends no cache.

Measuring. The input stage is timed over ``steps`` batches after ``warmup``
untimed ones, all from one epoch of the loader: ``warmup`` must be below the
loader's batches per epoch, and when fewer than ``steps`` batches are left
the doctor times those and says so (``input_batches_timed``).
"""

from __future__ import annotations

import enum
import logging
import math
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.errors import TrainerConfigError
from trainers.fit import resolve_device
from trainers.schedule import SwitchRule

__all__ = [
    "Diagnosis",
    "Verdict",
    "amdahl_bound",
    "diagnose",
    "estimate_record_bytes",
    "measure_compute",
    "measure_input",
    "recommend_cache",
]

logger = logging.getLogger(__name__)

RECORD_HEADER_BYTES = 64
_PAGE = 4096
_OVERFLOW_THRESHOLD = 2000


class Verdict(str, enum.Enum):
    """What limits a training step (see the module docstring for thresholds)."""

    INPUT_BOUND = "input-bound"
    INPUT_SIGNIFICANT = "input-significant"
    COMPUTE_BOUND = "compute-bound"

    @classmethod
    def of(cls, input_share: float) -> Verdict:
        if input_share >= 0.5:
            return cls.INPUT_BOUND
        if input_share >= 0.1:
            return cls.INPUT_SIGNIFICANT
        return cls.COMPUTE_BOUND


def amdahl_bound(input_share: float, cached_cost_ratio: float = 0.0) -> float:
    """Best speed-up of a step when the input stage costs ``cached_cost_ratio`` of itself.

    Parameters
    ----------
    input_share : float
        Input stage's share of a step, in [0, 1].
    cached_cost_ratio : float
        Cost of a cached batch over a fresh one, in [0, 1] (0: free).

    Returns
    -------
    float
        ``1 / (1 - s + s * r)``; ``inf`` when ``s = 1`` and ``r = 0``.

    Examples
    --------
    >>> round(amdahl_bound(0.3), 3)
    1.429
    >>> round(amdahl_bound(0.3, cached_cost_ratio=0.1), 3)
    1.37
    """
    if not 0.0 <= input_share <= 1.0:
        raise TrainerConfigError(f"input_share must be in [0, 1], got {input_share!r}")
    if not 0.0 <= cached_cost_ratio <= 1.0:
        raise TrainerConfigError(f"cached_cost_ratio must be in [0, 1], got {cached_cost_ratio!r}")
    denominator = 1.0 - input_share + input_share * cached_cost_ratio
    return math.inf if denominator == 0 else 1.0 / denominator


def estimate_record_bytes(sample_bytes: int) -> int:
    """Estimated bytes on disk of one cached sample of ``sample_bytes`` payload bytes."""
    raw = sample_bytes + RECORD_HEADER_BYTES
    if raw > _OVERFLOW_THRESHOLD:
        return math.ceil(raw / _PAGE) * _PAGE
    return math.ceil(raw * 1.5)


def recommend_cache(
    *,
    num_samples: int,
    sample_bytes: int,
    free_bytes: int,
    epochs: int,
    phase1_fraction: float = 0.5,
    reuse: int = 4,
    disk_fraction: float = 0.5,
) -> tuple[int, int]:
    """Recommended number of variants and cache size in bytes (see the module docstring).

    Parameters
    ----------
    num_samples : int
        Samples in the training split.
    sample_bytes : int
        Bytes of one augmented sample as the loader yields it (uint8 C x H x W).
    free_bytes : int
        Bytes free on the cache's disk.
    epochs : int
        Epochs of the training run.
    phase1_fraction : float
        Share of the epochs trained on the cache (phase 1).
    reuse : int
        Epochs each cached variant is to serve.
    disk_fraction : float
        Share of ``free_bytes`` the cache may take, in (0, 1].

    Returns
    -------
    (variants, max_bytes)
        ``(0, 0)`` when not one variant fits in ``disk_fraction * free_bytes``,
        or when the phase-1 budget is 0 epochs (``phase1_fraction = 0``).
    """
    if num_samples < 1 or sample_bytes < 1:
        raise TrainerConfigError("num_samples and sample_bytes must be positive")
    if epochs < 1 or reuse < 1:
        raise TrainerConfigError("epochs and reuse must be >= 1")
    if not 0 < disk_fraction <= 1 or not 0 <= phase1_fraction <= 1:
        raise TrainerConfigError("disk_fraction must be in (0, 1] and phase1_fraction in [0, 1]")
    per_variant = num_samples * estimate_record_bytes(sample_bytes)
    fit = int(disk_fraction * free_bytes // per_variant)
    phase1 = SwitchRule(budget_fraction=phase1_fraction).budget_epochs(epochs)
    if fit < 1 or phase1 == 0:
        return 0, 0
    variants = max(1, min(fit, phase1 // reuse))
    return variants, variants * per_variant


def measure_input(
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, steps: int, warmup: int = 2
) -> tuple[float, tuple[int, ...]]:
    """Seconds per batch of the loader alone, and the shape of its batches.

    The first ``warmup`` batches (pipeline start-up) are not timed. Batches
    the loader prepared ahead during the warm-up come out at no cost, so
    ``steps`` should be well above its prefetch depth (a torch DataLoader
    holds ``num_workers * prefetch_factor`` batches). When the epoch has
    fewer than ``steps`` batches after the warm-up, those are timed (a
    warning says how many; :func:`diagnose` records the number).

    Raises
    ------
    TrainerConfigError
        The epoch has no more than ``warmup`` batches.
    """
    seconds, shape, timed = _measure_input(loader, steps=steps, warmup=warmup)
    if timed < steps:
        logger.warning(
            "steps=%d: the loader had only %d batches left after the %d warm-up ones (%s); "
            "timed those",
            steps,
            timed,
            warmup,
            _batches_available(loader),
        )
    return seconds, shape


def _batches_available(loader: object) -> str:
    try:
        return f"{len(loader)} batches per epoch"  # type: ignore[arg-type]
    except TypeError:
        return "fewer batches per epoch"


def _measure_input(
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, steps: int, warmup: int
) -> tuple[float, tuple[int, ...], int]:
    """:func:`measure_input`, plus the number of batches timed."""
    it = iter(loader)
    shape: tuple[int, ...] = ()
    for k in range(warmup):
        try:
            images, _labels = next(it)
        except StopIteration:
            raise TrainerConfigError(
                f"--warmup {warmup} (warmup=) asks for more batches than the loader has: it "
                f"ended after {k} ({_batches_available(loader)}); lower --warmup and --steps, "
                "lower --batch-size, or use a larger dataset"
            ) from None
        shape = tuple(images.shape)
    t0 = time.perf_counter()
    n = 0
    for _ in range(steps):
        try:
            images, _labels = next(it)
        except StopIteration:
            break
        shape = tuple(images.shape)
        n += 1
    elapsed = time.perf_counter() - t0
    if n == 0:
        raise TrainerConfigError(
            f"the loader has no batches beyond the {warmup} warm-up ones "
            f"({_batches_available(loader)}); lower --warmup/--steps, lower --batch-size, "
            "or use a larger dataset"
        )
    close = getattr(loader, "close", None)
    if callable(close):
        close()
    return elapsed / n, shape, n


def measure_compute(
    model: nn.Module,
    batch_shape: tuple[int, ...],
    *,
    num_classes: int,
    steps: int,
    warmup: int = 2,
    device: torch.device | str = "cpu",
) -> float:
    """Seconds per training step of ``model`` on a synthetic in-memory batch.

    Parameters
    ----------
    model : torch.nn.Module
        The model, trained with SGD and cross-entropy as :func:`trainers.fit` does.
    batch_shape : tuple of int
        ``(N, C, H, W)`` of one batch.
    num_classes : int
        Classes of the synthetic labels.
    steps, warmup : int
        Steps timed, after ``warmup`` untimed ones.
    device : torch.device or str
        Where the steps run (CUDA is synchronised before and after the timing).
    """
    dev = torch.device(device)
    model = model.to(dev).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(batch_shape, generator=gen).to(dev)
    labels = torch.randint(0, num_classes, (batch_shape[0],), generator=gen).to(dev)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(model(images), labels).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return (time.perf_counter() - t0) / steps


@dataclass(frozen=True)
class Diagnosis:
    """What the doctor measured and recommends (times in seconds, sizes in bytes)."""

    batch_size: int
    image_shape: tuple[int, ...]
    input_s_per_batch: float
    compute_s_per_batch: float
    input_share: float
    verdict: Verdict
    cached_cost_ratio: float
    amdahl_bound: float
    amdahl_bound_free: float
    num_samples: int
    sample_bytes: int
    record_bytes: int
    cache_dir: str
    free_disk_bytes: int
    epochs: int
    phase1_fraction: float
    recommended_variants: int
    recommended_max_bytes: int
    phase1_epochs: int = 0
    input_batches_requested: int = 0
    input_batches_timed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        d = asdict(self)
        d["verdict"] = self.verdict.value
        d["image_shape"] = list(self.image_shape)
        return d

    def text(self) -> str:
        """A human-readable report."""
        gib = 1 << 30
        lines = [
            (
                f"input stage:   {self.input_s_per_batch * 1e3:8.1f} ms/batch "
                f"({self.batch_size / self.input_s_per_batch:,.0f} images/s alone)"
            ),
            *(
                [
                    (
                        f"  (timed {self.input_batches_timed} batches, not the "
                        f"{self.input_batches_requested} of --steps: the epoch had no more "
                        "after the warm-up)"
                    )
                ]
                if self.input_batches_timed < self.input_batches_requested
                else []
            ),
            (
                f"compute stage: {self.compute_s_per_batch * 1e3:8.1f} ms/batch "
                f"({self.batch_size / self.compute_s_per_batch:,.0f} images/s alone)"
            ),
            f"input share of a step: {self.input_share:.1%} -> {self.verdict.value}",
            (
                f"Amdahl bound on the speed-up from caching: {self.amdahl_bound:.2f}x "
                f"(cached input at {self.cached_cost_ratio:.0%} of fresh; "
                f"{self.amdahl_bound_free:.2f}x if free)"
            ),
        ]
        if self.recommended_variants:
            lines.append(
                f"recommended cache: variants={self.recommended_variants}, "
                f"max_bytes={self.recommended_max_bytes} "
                f"({self.recommended_max_bytes / gib:.2f} GiB; "
                f"{self.num_samples} samples x {self.record_bytes} B/record) in {self.cache_dir} "
                f"({self.free_disk_bytes / gib:.1f} GiB free)"
            )
        elif self.phase1_epochs == 0:
            lines.append(
                f"no cache recommended: a phase-1 fraction of {self.phase1_fraction:g} leaves no "
                "phase-1 epoch to serve from a cache (train with --schedule fresh)"
            )
        else:
            lines.append(
                f"no cache recommended: one variant ({self.num_samples} x {self.record_bytes} B) "
                f"does not fit in half of the {self.free_disk_bytes / gib:.1f} GiB free "
                f"in {self.cache_dir}"
            )
        if self.verdict is Verdict.COMPUTE_BOUND:
            lines.append("training is compute-bound: caching can save little time here")
        return "\n".join(lines)


def diagnose(
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    model: nn.Module,
    *,
    num_classes: int,
    num_samples: int,
    steps: int = 40,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    cache_dir: str | os.PathLike[str] = ".",
    epochs: int = 20,
    phase1_fraction: float = 0.5,
    cached_cost_ratio: float = 0.0,
    reuse: int = 4,
    disk_fraction: float = 0.5,
) -> Diagnosis:
    """Measure both stages and build a :class:`Diagnosis` (see the module docstring).

    Parameters
    ----------
    loader : iterable of (images, labels)
        The training loader as it would run (its batches are timed, then discarded).
    model : torch.nn.Module
        The model whose training step is timed on batches of the loader's shape.
    num_classes, num_samples : int
        Classes, and samples in the training split (sizes the cache advice).
    steps, warmup : int
        Batches (and steps) timed, after ``warmup`` untimed ones.
    device : torch.device or str
        Where the model runs.
    cache_dir : path
        Where a cache would go (its disk's free bytes size the advice).
    epochs, phase1_fraction, reuse, disk_fraction
        As :func:`recommend_cache`'s.
    cached_cost_ratio : float
        The cost of reading a cached batch relative to producing it fresh (0: free), for
        the Amdahl bound (see the module docstring).

    Raises
    ------
    TrainerConfigError
        Bad ``steps``/``warmup`` (or more warm-up batches than the loader
        has), or a ``device`` that is not available.
    """
    if steps < 1 or warmup < 0:
        raise TrainerConfigError(f"steps must be >= 1 and warmup >= 0, got {steps}, {warmup}")
    dev = resolve_device(device)
    t_in, shape, timed = _measure_input(loader, steps=steps, warmup=max(warmup, 1))
    t_c = measure_compute(
        model, shape, num_classes=num_classes, steps=steps, warmup=warmup, device=dev
    )
    share = t_in / (t_in + t_c)
    sample_bytes = int(math.prod(shape[1:]))  # uint8 C*H*W as cached
    probe = Path(cache_dir)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    variants, max_bytes = recommend_cache(
        num_samples=num_samples,
        sample_bytes=sample_bytes,
        free_bytes=free,
        epochs=epochs,
        phase1_fraction=phase1_fraction,
        reuse=reuse,
        disk_fraction=disk_fraction,
    )
    return Diagnosis(
        batch_size=int(shape[0]),
        image_shape=tuple(int(s) for s in shape[1:]),
        input_s_per_batch=t_in,
        compute_s_per_batch=t_c,
        input_share=share,
        verdict=Verdict.of(share),
        cached_cost_ratio=cached_cost_ratio,
        amdahl_bound=amdahl_bound(share, cached_cost_ratio),
        amdahl_bound_free=amdahl_bound(share, 0.0),
        num_samples=num_samples,
        sample_bytes=sample_bytes,
        record_bytes=estimate_record_bytes(sample_bytes),
        cache_dir=str(Path(cache_dir)),
        free_disk_bytes=int(free),
        epochs=epochs,
        phase1_fraction=phase1_fraction,
        recommended_variants=variants,
        recommended_max_bytes=max_bytes,
        phase1_epochs=SwitchRule(budget_fraction=phase1_fraction).budget_epochs(epochs),
        input_batches_requested=steps,
        input_batches_timed=timed,
    )
