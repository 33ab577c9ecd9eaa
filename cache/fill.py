"""``CacheFiller``: write samples produced on cache misses without pausing training.

The fresh path (decode + augment) hands each produced batch to
:meth:`CacheFiller.submit`. What happens next depends on the store's
:class:`~cache.config.FillMode`:

``BACKGROUND`` (default)
    The batch goes on a bounded queue (``CacheConfig.fill_queue`` batches) and
    a writer thread (``cache-filler``) writes everything queued so far, and what
    arrives within ``COALESCE_SECONDS`` (50 ms, up to ``fill_queue`` batches), in one
    LMDB transaction. **When the queue is full the batch is dropped**: it is not
    cached this time (counted in :attr:`FillStats.dropped_queue_full`) and is
    produced fresh again, and offered again, the next time it is needed.
    ``submit`` never blocks on the disk.
``INLINE``
    ``submit`` writes the batch before returning (ahead-of-time builds).
``OFF``
    Nothing is written.

A store that stopped admitting (``FULL``, ``FAILED``, ``READ_ONLY``, ``STALE``) makes
``submit`` return ``False`` at once without copying anything. A write failure
(disk full, I/O error) is kept in :attr:`CacheFiller.error` and logged at DEBUG
only; it never propagates into the training loop. Whoever drives the filler
reports it once: the loader as a ``CacheWarning`` at the user's loop, ``dataplane
cache build`` in its output (a WARNING record beside them would be printed a second
time where logging is not set up).

Copies: ``submit`` encodes the batch's records (header, payload, checksum) at
once, into a record buffer the writer hands back after its commit, and queues
them; the writer only puts them into LMDB. So the producer may reuse its own
buffer as soon as ``submit`` returns, and each sample is copied once before LMDB
copies it: reusing record buffers halves the cost of that copy against writing
into new memory (``benchmarks/cache_costs.py`` at 224x224x3: about 27 us of CPU
per sample instead of 63-78 us for a copy plus encoding in the writer).

Memory: each queued batch holds one record buffer, so the filler holds at most
``2 * fill_queue + 1`` of them (the queue, and what the writer took from it for
its transaction); buffers beyond that are not kept for reuse.

Processes: the writer thread belongs to the process that started it. After a
``fork`` the child's first ``submit`` starts its own thread (queued batches of
the parent are not carried over).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
import weakref
from typing import Any

import numpy as np

from cache.config import FillMode
from cache.errors import CacheError
from cache.store import CacheStore, EncodedBatch

logger = logging.getLogger(__name__)

_STOP = object()

#: Seconds the writer waits for more batches to join a transaction (see module docs).
COALESCE_SECONDS = 0.05


@dataclasses.dataclass
class FillStats:
    """Counters of a filler (samples unless noted).

    Attributes
    ----------
    submitted : int
        Samples offered to :meth:`CacheFiller.submit`.
    written : int
        Records written (already-present records are not counted).
    dropped_queue_full : int
        Samples dropped because the background queue was full.
    dropped_not_admitting : int
        Samples offered while the store did not admit (full, failed, off).
    transactions : int
        Write transactions committed.
    """

    submitted: int = 0
    written: int = 0
    dropped_queue_full: int = 0
    dropped_not_admitting: int = 0
    transactions: int = 0


def _writer_loop(filler_ref: weakref.ReferenceType[CacheFiller], q: queue.Queue[Any]) -> None:
    while True:
        try:
            item = q.get(timeout=1.0)
        except queue.Empty:
            if filler_ref() is None:  # the filler was garbage-collected: stop
                return
            continue
        batch = [item]
        # Coalesce into one transaction what is queued, and what arrives within
        # COALESCE_SECONDS, up to the queue's bound: fewer commits (each one an fsync
        # when durable) for the same records.
        deadline = time.monotonic() + COALESCE_SECONDS
        while batch[-1] is not _STOP and len(batch) < max(1, q.maxsize):
            remaining = deadline - time.monotonic()
            try:
                batch.append(q.get(timeout=remaining) if remaining > 0 else q.get_nowait())
            except queue.Empty:
                break
        stop = any(b is _STOP for b in batch)
        work = [b for b in batch if b is not _STOP]
        filler = filler_ref()
        if filler is not None and work:
            try:
                filler._write(work)
            except BaseException as exc:  # never leave queued work without task_done
                filler.error = CacheError(f"the cache writer failed: {exc!r}")
                # DEBUG, with the traceback: the error is reported where it is read.
                logger.debug("cache filling stopped: the writer failed", exc_info=True)
        del filler
        for _ in batch:
            q.task_done()
        if stop:
            return


class CacheFiller:
    """Writes batches produced by the fresh path into a :class:`CacheStore`.

    Parameters
    ----------
    store : CacheStore
        Where to write.
    mode : FillMode, optional
        Default: the store's ``config.fill``.
    queue_batches : int, optional
        Background queue bound in batches. Default: ``config.fill_queue``.

    Examples
    --------
    >>> filler = CacheFiller(store)                                   # doctest: +SKIP
    >>> for indices, images, labels in fresh_batches:                 # doctest: +SKIP
    ...     filler.submit(indices, epoch % store.variants, images, labels)
    >>> filler.close()  # writes what is queued, stops the thread      # doctest: +SKIP
    """

    def __init__(
        self,
        store: CacheStore,
        *,
        mode: FillMode | str | None = None,
        queue_batches: int | None = None,
    ) -> None:
        if not isinstance(store, CacheStore):
            raise CacheError(f"store must be a cache.CacheStore, not {type(store).__name__}")
        self.store = store
        try:
            self.mode = FillMode(mode if mode is not None else store.config.fill)
        except ValueError:
            raise CacheError(
                f"mode must be one of {[m.value for m in FillMode]}, not {mode!r}"
            ) from None
        self.queue_batches = queue_batches if queue_batches is not None else store.config.fill_queue
        if (
            isinstance(self.queue_batches, bool)
            or not isinstance(self.queue_batches, int)
            or self.queue_batches < 1
        ):
            raise CacheError(f"queue_batches must be a positive int, not {self.queue_batches!r}")
        self.stats = FillStats()
        #: The write failure that stopped filling, if any (logged at DEBUG only: the
        #: caller reports it, see the module docs).
        self.error: CacheError | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._queue: queue.Queue[Any] | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._buffers: list[np.ndarray] = []  # record buffers free for reuse

    # -- public -----------------------------------------------------------------------
    @property
    def admitting(self) -> bool:
        """True while submitted batches may be written."""
        return (
            not self._closed
            and self.mode is not FillMode.OFF
            and self.error is None
            and self.store.admitting
        )

    def submit(
        self,
        indices: Any,
        variant: int,
        images: Any,
        labels: Any,
    ) -> bool:
        """Offer one produced batch to the cache; never raises on write failures.

        ``images`` is encoded (copied) before ``submit`` returns, so the caller may
        reuse its buffer at once.

        Parameters
        ----------
        indices : array-like of int
            Sample indices of the rows of ``images``.
        variant : int
            Their variant.
        images : array-like
            uint8 ``(n, C, H, W)``; anything ``numpy.asarray`` accepts (a CPU
            torch tensor via ``tensor.numpy()``, zero-copy).
        labels : array-like of int
            Their labels.

        Returns
        -------
        bool
            True if the batch was written (``INLINE``) or queued (``BACKGROUND``);
            False if it was dropped (queue full, store not admitting, ``OFF``).
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        self.stats.submitted += idx.size
        if not self.admitting:
            self.stats.dropped_not_admitting += idx.size
            return False
        arr = np.asarray(images)
        lab = np.asarray(labels, dtype=np.int64).reshape(-1)
        q = self._ensure_thread() if self.mode is FillMode.BACKGROUND else None
        if q is not None and q.full():  # dropped without encoding (the writer is behind)
            self.stats.dropped_queue_full += idx.size
            return False
        buffer = self._take_buffer(idx.size)
        try:
            item = self.store.encode_batch(idx, int(variant), arr, lab, out=buffer)
        except CacheError as exc:
            self._give_buffer(buffer)
            self.error = exc
            logger.debug("cache filling stopped: %s", exc)  # reported from self.error
            return False
        if q is None:  # INLINE
            return self._write([item])
        try:
            q.put_nowait(item)
        except queue.Full:
            self._give_buffer(buffer)
            self.stats.dropped_queue_full += idx.size
            return False
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued batch is written; False if ``timeout`` (s) passed first."""
        q = self._queue
        if q is None or self._pid != os.getpid():
            return True
        if timeout is None:
            q.join()
            return True
        done = threading.Event()

        def _join() -> None:
            q.join()
            done.set()

        threading.Thread(target=_join, daemon=True, name="cache-filler-flush").start()
        return done.wait(timeout)

    def close(self, *, drain: bool = True) -> None:
        """Stop the writer thread (idempotent).

        Parameters
        ----------
        drain : bool
            Write what is queued first (True), or discard it (False; the thread
            still finishes the transaction it is in).
        """
        self._closed = True
        q, thread = self._queue, self._thread
        if q is None or thread is None or self._pid != os.getpid():
            return
        if not drain:
            while True:
                try:
                    q.get_nowait()
                    q.task_done()
                except queue.Empty:
                    break
        q.put(_STOP)
        thread.join()
        self._queue = self._thread = None

    def __enter__(self) -> CacheFiller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------
    def _ensure_thread(self) -> queue.Queue[Any]:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's thread does not exist here
                self._pid = os.getpid()
                self._queue = self._thread = None
                self._lock = threading.Lock()
            if self._queue is None or self._thread is None or not self._thread.is_alive():
                q: queue.Queue[Any] = queue.Queue(maxsize=self.queue_batches)
                thread = threading.Thread(
                    target=_writer_loop,
                    args=(weakref.ref(self), q),
                    name="cache-filler",
                    daemon=True,
                )
                thread.start()
                self._queue, self._thread = q, thread
            return self._queue

    def _take_buffer(self, rows: int) -> np.ndarray | None:
        """A free record buffer of at least ``rows`` rows, or None (encode allocates)."""
        with self._lock:
            for i, buffer in enumerate(self._buffers):
                if buffer.shape[0] >= rows and buffer.shape[1] == self.store.record_size:
                    return self._buffers.pop(i)
        return None

    def _give_buffer(self, buffer: np.ndarray | None) -> None:
        if buffer is None:
            return
        with self._lock:
            if len(self._buffers) < 2 * self.queue_batches + 1:
                self._buffers.append(buffer)

    def _write(self, batches: list[EncodedBatch]) -> bool:
        """Write encoded batches in one transaction; their buffers return to the pool."""
        try:
            if self.error is not None:
                return False
            written = self.store.put_encoded(batches)
        except CacheError as exc:
            self.error = exc
            logger.debug("cache filling stopped: %s", exc)  # reported from self.error
            return False
        finally:
            for batch in batches:
                self._give_buffer(batch.buffer)
        self.stats.written += written
        self.stats.transactions += 1
        return self.store.admitting or written > 0
