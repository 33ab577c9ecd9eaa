"""The default :class:`~dataplane.producer.BatchProducer`: fresh samples through DALI.

Encoded bytes are read from the source in the planned order and handed to the
recipe's DALI pipeline through a batched ``fn.external_source`` callback, so the
order, shard and resume position are exactly the plan's.

Threads and memory
------------------
One worker thread (``dataplane-producer``) drives the pipeline: it hands the
bytes of batch ``k+1`` to DALI, copies batch ``k`` out of DALI into a torch
tensor, and puts it on a queue of at most ``prefetch`` finished batches. A second
thread (``dataplane-reader``) reads the bytes of the batch after the one being
handed over, and DALI takes those bytes without copying them. Together the two
took the feeding thread off the critical path (measured once against the code
without them, each in its own process: +8-17% images/s on an H100 at 224 px,
+12-16% on 2 CPU cores).

On the CPU, DALI itself runs one batch at a time (``prefetch_queue_depth=1``):
with deeper DALI queues a decode failure can crash the process (observed with
DALI 2.4's CPU decoders on corrupt PNGs), and the worker thread gives nearly the
same overlap. On CUDA, DALI's queue is ``prefetch`` deep, since mixed decode
needs its CPU and GPU stages to overlap (about 5x the throughput of depth 1 on an
H100). At most ``2 * prefetch + 1`` batches are held at once.

A pipeline that ran to the end of a pass is kept in ``context.state`` and reused
by the next pass of the same loader (building one takes seconds with GPU
decoders); one stopped early or failed is released. Augmentation randomness
therefore continues from pass to pass: batch order and content follow the plan
exactly, while the random crops of a resumed run differ from the original's.
:meth:`DaliBatchProducer.close` (also run when the consumer stops early or is
garbage-collected, and at interpreter exit, before DALI's own exit hook) stops and
joins the worker, which releases its threads.

On failure
----------
Each sample's structure is checked before it reaches DALI
(:func:`dataplane.validate.check_encoded`, once per sample and loader); a sample
failing the check is corrupt. Should DALI still fail, it reports a decode
failure for a whole batch and the pipeline becomes unusable. The producer then
decodes the failed batch's samples one by one with a one-sample pipeline to
find the culprit(s): under ``OnCorrupt.RAISE`` it raises
:class:`~dataplane.errors.DataError` naming the first one (index and file);
under ``OnCorrupt.SKIP`` it leaves them out, rebuilds the pipeline and resumes at
the failed batch. A batch left without any sample is never yielded empty: it is
made of the next valid samples of the pass instead (see ``_Feeder._replacements``).
A failure that no single sample explains is re-raised as
:class:`~dataplane.errors.PipelineError`. A file that cannot be read (``OSError``)
is treated like a corrupt sample. Nothing is ever written to the source.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dataplane.background import BackgroundProducer, register_exit_hook
from dataplane.errors import SKIP_HINT, DataError, PipelineError
from dataplane.producer import (
    BatchRequest,
    OnCorrupt,
    ProducedBatch,
    ProducerContext,
    SkippedSample,
    following_indices,
)
from dataplane.validate import check_encoded

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


def _dali_reason(exc: BaseException) -> str:
    """The informative line of a DALI error message.

    DALI's message names the failing operator, then (after ``encountered:``) what
    went wrong, e.g. ``Failed to decode sample #0 :``; the reason is the latter, with
    the operator, and without the sample's position in DALI's batch.
    """
    text = str(exc)
    match = re.search(r"nvImageCodec failure[^\n]*", text)
    if match:
        return match.group(0).strip()
    operator = re.search(r"Error in [A-Z]+ operator `([^`]+)`", text)
    match = re.search(r"encountered:\s*\n\s*([^\n]+)", text)
    if match:
        detail = re.sub(r"\s*#\d+\s*:?\s*$", "", match.group(1).strip()).rstrip(" :.")
        if detail and not detail.startswith("Current pipeline object"):
            return f"{detail} (in {operator.group(1)})" if operator else detail
    for pattern in (r"Error in [^\n]*", r"[^\n]*[Ee]rror[^\n]*"):
        match = re.search(pattern, text)
        if match:
            return match.group(0).strip().rstrip(",")
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _read_many(source: Any, indices: list[int]) -> list[bytes | BaseException]:
    """Encoded bytes of ``indices`` in order; a failed read is returned, not raised."""
    out: list[bytes | BaseException] = []
    for i in indices:
        try:
            out.append(source.read(i))
        except Exception as exc:  # reported by the feeder, in order
            out.append(exc)
    return out


class _Feeder:
    """``external_source`` callback: encoded bytes of the planned batches, in order.

    Read-ahead: when batch ``k`` is handed to DALI, the bytes of batch ``k + 1`` are
    read on ``reader`` (one helper thread; file reads release the GIL), so reading
    overlaps DALI's work and the feeding of batch ``k``. Only raw bytes are read
    ahead; every check and exclusion happens here, in order, as without it.

    DALI uses the returned arrays without copying them (``no_copy``): each batch's
    arrays stay referenced in :attr:`in_flight` until its outputs are taken.
    """

    def __init__(
        self,
        context: ProducerContext,
        requests: Sequence[BatchRequest],
        start: int,
        excluded: dict[int, SkippedSample],
        reader: concurrent.futures.Executor | None = None,
    ) -> None:
        self._reader = reader
        #: The read of request ``self._next``, started when the one before was fed.
        self._ahead: concurrent.futures.Future[list[bytes | BaseException]] | None = None
        self._source = context.source
        self._on_corrupt = context.on_corrupt
        self._requests = requests
        self._next = start
        self._excluded = excluded
        self._checked = context.checked
        #: (request number, indices, encoded arrays) of batches handed to DALI, not yet
        #: returned; holding the arrays keeps DALI's uncopied input alive.
        self.in_flight: collections.deque[tuple[int, np.ndarray, list[np.ndarray]]] = (
            collections.deque()
        )
        #: First corrupt sample per request number (raised when that batch is due).
        self.read_errors: dict[int, DataError] = {}

    def __call__(self) -> list[np.ndarray]:
        while self._next < len(self._requests):
            k = self._next
            self._next += 1
            indices: list[int] = []
            data: list[np.ndarray] = []
            raws = self._read(k)
            for i, raw in zip(self._requests[k].indices.tolist(), raws, strict=True):
                if i in self._excluded:
                    continue
                raw, reason = self._check(i, raw)
                if reason is not None:
                    path = self._source.describe(i)
                    if self._on_corrupt is OnCorrupt.RAISE:
                        verb = "read" if reason.startswith("unreadable") else "decode"
                        self.read_errors.setdefault(
                            k,
                            DataError(
                                f"cannot {verb} sample {i} ({path}): {reason}. Fix or remove "
                                f"the file, or {SKIP_HINT}",
                                index=i,
                                path=path,
                            ),
                        )
                    else:
                        self._excluded[i] = SkippedSample(i, path, reason)
                    continue
                indices.append(i)
                data.append(np.frombuffer(raw, dtype=np.uint8))
            if not data and self._on_corrupt is OnCorrupt.SKIP:
                indices, data = self._replacements(k)
            if data:
                self.in_flight.append((k, np.asarray(indices, dtype=np.int64), data))
                return data
        raise StopIteration

    def _check(self, i: int, raw: bytes | BaseException) -> tuple[bytes, str | None]:
        """``(bytes, None)`` for a well-formed sample ``i``, ``(_, reason)`` otherwise."""
        try:
            if isinstance(raw, BaseException):
                raise raw
            if self._checked is None or not self._checked[i]:
                reason = check_encoded(raw)
                if reason is None and self._checked is not None:
                    self._checked[i] = True
                return raw, reason
            return raw, None
        except OSError as exc:
            return b"", f"unreadable: {exc}"

    def _replacements(self, k: int) -> tuple[list[int], list[np.ndarray]]:
        """Samples standing in for request ``k``, every sample of which was skipped.

        A batch is never empty (an empty batch gives a NaN loss): it is made of the
        next valid samples of the pass, in planned order from request ``k + 1`` on
        (wrapping around to the pass's first), repeated if need be to the request's
        size. Only this rank's requests are used, so every rank still yields one
        batch per request. None found: ``([], [])``, and the batch stays empty.
        """
        want = int(self._requests[k].indices.size)
        indices: list[int] = []
        data: list[np.ndarray] = []
        for i in following_indices(self._requests, k, self._excluded):
            raw, reason = self._check(i, self._read_one(i))
            if reason is not None:  # reported with its own batch, if still due
                self._excluded[i] = SkippedSample(i, self._source.describe(i), reason)
                continue
            indices.append(i)
            data.append(np.frombuffer(raw, dtype=np.uint8))
            if len(indices) == want:
                break
        if indices:
            logger.info(
                "every sample of batch %d was skipped; it holds samples %s of the pass instead",
                int(self._requests[k].position),
                indices,
            )
        while indices and len(indices) < want:
            extra = min(want - len(indices), len(indices))
            indices, data = indices + indices[:extra], data + data[:extra]
        return indices, data

    def _read_one(self, i: int) -> bytes | BaseException:
        try:
            return self._source.read(i)  # type: ignore[no-any-return]
        except Exception as exc:  # noqa: BLE001 - judged by _check, like a read-ahead failure
            return exc

    def _read(self, k: int) -> list[bytes | BaseException]:
        """Bytes of request ``k`` (read ahead, or now); starts reading request ``k + 1``."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # requests are fed in order: this is request k's read
            raws = ahead.result()
        else:
            raws = _read_many(self._source, self._requests[k].indices.tolist())
        if self._reader is not None and k + 1 < len(self._requests):
            try:
                self._ahead = self._reader.submit(
                    _read_many, self._source, self._requests[k + 1].indices.tolist()
                )
            except RuntimeError:  # the producer is closing: read on demand instead
                pass
        return raws


class _SourceSlot:
    """The pipeline's ``external_source`` callback, re-pointed at each pass's feeder
    so that a built pipeline can serve several passes."""

    def __init__(self) -> None:
        self.feeder: _Feeder | None = None

    def __call__(self) -> list[np.ndarray]:
        if self.feeder is None:
            raise StopIteration
        return self.feeder()


class DaliBatchProducer(BackgroundProducer):
    """Produces batches with the recipe's DALI pipeline (see module docs).

    Parameters
    ----------
    context : ProducerContext
        Source, recipe, device, threads, prefetch depth, seed, corrupt policy.
    requests : sequence of BatchRequest
        The batches to produce, in order.
    """

    def __init__(self, context: ProducerContext, requests: Sequence[BatchRequest]) -> None:
        import nvidia.dali.pipeline  # noqa: F401 - registers DALI's exit hook first

        # Exit hooks run last-registered first: producers still running at exit are
        # closed before DALI shuts its pipelines down under their worker threads
        # (which aborts the process).
        register_exit_hook()
        self._ctx = context
        self._requests = list(requests)
        self._excluded: dict[int, SkippedSample] = {}
        self._pipe: Any = None
        self._probe: Any = None
        self._rebuilds = 0
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        super().__init__(prefetch=context.prefetch, thread_name="dataplane-producer")

    # -- the worker (see dataplane.background) --------------------------------------
    def _run(self) -> bool:
        for batch in self._produce():
            if not self._put(batch):
                return False
        return True

    def _cleanup(self) -> None:
        # Release the pipelines (DALI's threads) with the worker.
        self._pipe = None
        self._probe = None
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.shutdown(wait=True, cancel_futures=True)

    def _build(self, batch_size: int, source: Any, prefetch: int, seed: int) -> Any:
        from preprocessing import build_pipeline

        return build_pipeline(
            self._ctx.recipe,
            device=self._ctx.device,
            batch_size=batch_size,
            num_threads=self._ctx.num_threads,
            seed=seed,
            source=source,
            prefetch_queue_depth=prefetch,
            device_id=self._ctx.device_id,
            source_no_copy=True,  # the feeder keeps its arrays until outputs are taken
        )

    def _dali_depth(self) -> int:
        """DALI's own queue depth: 1 on the CPU (see module docs), ``prefetch`` on CUDA,
        where mixed decode needs its CPU and GPU stages to overlap."""
        from preprocessing import Device

        return 1 if self._ctx.device is Device.CPU else max(1, self._ctx.prefetch)

    # -- conversion ------------------------------------------------------------------
    def _to_torch(self, output: Any) -> torch.Tensor:
        import torch
        from nvidia.dali.plugin.pytorch import feed_ndarray

        try:
            tensor = output.as_tensor()
        except RuntimeError as exc:
            raise PipelineError(
                f"recipe {self._ctx.recipe.name!r} produced images of different shapes; a "
                f"recipe must output uint8 (channels, size, size) = ({self._ctx.recipe.channels}, "
                f"{self._ctx.recipe.size}, {self._ctx.recipe.size}) for every sample: {exc}"
            ) from exc
        r = self._ctx.recipe
        shape = tuple(tensor.shape())
        if len(shape) != 4 or shape[1:] != (r.channels, r.size, r.size):
            raise PipelineError(
                f"recipe {r.name!r} produced images of shape {shape[1:]}; expected uint8 "
                f"({r.channels}, {r.size}, {r.size}) in CHW layout"
            )
        # Copy into torch-owned memory at once (DALI's own copy, as its PyTorch iterator
        # does): a zero-copy DLPack view is not safe once the pipeline has failed
        # asynchronously on a later batch.
        if self._ctx.device_id is not None:
            # No stream given: a blocking copy, complete when the batch is queued.
            images = torch.empty(shape, dtype=torch.uint8, device=f"cuda:{self._ctx.device_id}")
            feed_ndarray(tensor, images)
        else:
            images = torch.empty(shape, dtype=torch.uint8)
            feed_ndarray(tensor, images)
        r = self._ctx.recipe
        return images

    def _empty(self) -> torch.Tensor:
        import torch

        r = self._ctx.recipe
        device = "cpu" if self._ctx.device_id is None else f"cuda:{self._ctx.device_id}"
        return torch.empty((0, r.channels, r.size, r.size), dtype=torch.uint8, device=device)

    # -- failure diagnosis -------------------------------------------------------------
    def _probe_one(self, index: int) -> str | None:
        """Run sample ``index`` alone through the recipe; the failure reason, or None."""
        from preprocessing import INPUT_NAME

        try:
            raw = self._ctx.source.read(index)
        except OSError as exc:
            return f"unreadable: {exc}"
        if self._probe is None:
            self._probe = self._build(1, None, 1, self._ctx.seed)
        try:
            self._probe.feed_input(INPUT_NAME, [np.frombuffer(raw, dtype=np.uint8)])
            out = self._probe.run()
            out[0].as_tensor()
        except RuntimeError as exc:
            self._probe = None  # a failed DALI pipeline cannot be reused
            return _dali_reason(exc)
        return None

    def _diagnose(
        self, suspects: list[tuple[int, np.ndarray, list[np.ndarray]]], error: BaseException
    ) -> None:
        """Find the corrupt samples among ``suspects``; raise or exclude them."""
        found = False
        for _, indices, _ in suspects:
            for i in indices.tolist():
                reason = self._probe_one(i)
                if reason is None:
                    continue
                found = True
                path = self._ctx.source.describe(i)
                if self._ctx.on_corrupt is OnCorrupt.RAISE:
                    raise DataError(
                        f"cannot decode sample {i} ({path}): {reason}. Fix or remove the file, "
                        f"or {SKIP_HINT}",
                        index=i,
                        path=path,
                    ) from error
                self._excluded[i] = SkippedSample(i, path, reason)
                logger.info("skipping corrupt sample %d (%s): %s", i, path, reason)
            if found:
                return
        raise PipelineError(
            f"the DALI pipeline of recipe {self._ctx.recipe.name!r} failed and no single "
            f"sample explains it: {_dali_reason(error)}"
        ) from error

    # -- iteration ---------------------------------------------------------------------
    def _produce(self) -> Iterator[ProducedBatch]:
        """The batches, in order (runs in the worker thread)."""
        delivered = 0  # requests delivered so far
        reported: set[int] = set()
        while delivered < len(self._requests) and not self.stopping:
            if self._reader is None:
                self._reader = concurrent.futures.ThreadPoolExecutor(1, "dataplane-reader")
            feeder = _Feeder(self._ctx, self._requests, delivered, self._excluded, self._reader)
            self._pipe, slot = self._take_pipeline()
            slot.feeder = feeder
            finished = False
            try:
                self._pipe.schedule_run()
                while not self.stopping:
                    try:
                        outputs = self._pipe.outputs()
                    except StopIteration:
                        finished = True
                        break
                    k, indices, _ = feeder.in_flight.popleft()
                    # Copy out and drop DALI's buffers *before* starting the next batch:
                    # a failing DALI iteration must find no output of ours still in use.
                    images = self._to_torch(outputs[0])
                    del outputs
                    self._pipe.schedule_run()
                    while delivered <= k:
                        if delivered in feeder.read_errors:
                            raise feeder.read_errors[delivered]
                        yield self._batch(delivered, images, indices, k, reported)
                        delivered += 1
                # Requests after the last non-empty one were entirely skipped.
                while delivered < len(self._requests) and not self.stopping:
                    if delivered in feeder.read_errors:
                        raise feeder.read_errors[delivered]
                    yield self._batch(delivered, None, None, -1, reported)
                    delivered += 1
                if finished:
                    self._return_pipeline(self._pipe, slot)
            except RuntimeError as exc:
                suspects = list(feeder.in_flight)
                self._pipe = None
                self._rebuilds += 1
                if not suspects:
                    raise PipelineError(
                        f"the DALI pipeline of recipe {self._ctx.recipe.name!r} failed: "
                        f"{_dali_reason(exc)}"
                    ) from exc
                self._diagnose(suspects, exc)
                # Resume at the first request not yet delivered, corrupt samples excluded.
            finally:
                slot.feeder = None
                self._pipe = None

    # -- pipeline reuse ------------------------------------------------------------------
    def _pipeline_key(self) -> tuple[Any, ...]:
        c = self._ctx
        return (
            "dali",
            c.recipe.fingerprint(),
            c.device.value,
            c.device_id,
            c.batch_size,
            c.num_threads,
            self._dali_depth(),
        )

    def _take_pipeline(self) -> tuple[Any, _SourceSlot]:
        """A built pipeline: the one a previous pass left in ``context.state``, or a new one."""
        cached = None
        if self._ctx.state is not None:
            cached = self._ctx.state.pop(self._pipeline_key(), None)
        if cached is not None and self._rebuilds == 0:
            return cached
        slot = _SourceSlot()
        seed = self._ctx.seed + 7919 * self._rebuilds
        return self._build(self._ctx.batch_size, slot, self._dali_depth(), seed), slot

    def _return_pipeline(self, pipe: Any, slot: _SourceSlot) -> None:
        """Keep a pipeline that ran to its end for the next pass (building one is slow,
        seconds with GPU decoders)."""
        if self._ctx.state is None:
            return
        pipe.reset()
        slot.feeder = None
        self._ctx.state[self._pipeline_key()] = (pipe, slot)

    def _batch(
        self,
        position: int,
        images: torch.Tensor | None,
        indices: np.ndarray | None,
        produced_at: int,
        reported: set[int],
    ) -> ProducedBatch:
        request = self._requests[position]
        skipped = tuple(
            self._excluded[i]
            for i in request.indices.tolist()
            if i in self._excluded and i not in reported
        )
        reported.update(s.index for s in skipped)
        if position != produced_at or images is None or indices is None:
            # Every sample of this request was skipped.
            return ProducedBatch(
                request.position, self._empty(), np.empty(0, dtype=np.int64), skipped
            )
        return ProducedBatch(request.position, images, indices, skipped)
