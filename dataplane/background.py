"""A producer that works on its own thread and hands batches over a bounded queue.

Both built-in producers (:class:`~dataplane.dali_producer.DaliBatchProducer` and
:class:`~dataplane.cached_producer.CachedBatchProducer`) share this lifecycle, so
it is written once here. Written by hand rather than with
``concurrent.futures``: the consumer must be able to stop the worker between any
two batches (a ``for`` loop left with ``break``) and must see the worker's
exception at the batch where it happened, which an executor's futures do not give.

Lifecycle
---------
1. ``iter(producer)`` starts the worker thread, which runs :meth:`_run`. The
   worker hands each item to the consumer with :meth:`_put`, which blocks while
   ``prefetch`` items are waiting (bounding memory) and returns ``False`` once the
   consumer asked to stop.
2. The consumer receives each item as :meth:`_deliver` turns it into a
   :class:`~dataplane.producer.ProducedBatch`; when it asks for the next one,
   :meth:`_release` is called with the previous item (e.g. to recycle a buffer).
3. An exception in the worker is re-raised in the consumer, in order, after the
   items produced before it.
4. :meth:`close` (also at the end of the pass, on ``break`` and on garbage
   collection) stops and joins the worker; it is idempotent.
5. At interpreter exit, producers still running are closed by
   :func:`close_all_at_exit` (registered by the DALI producer once DALI is
   imported, so that it runs before DALI shuts its pipelines down: a worker
   thread still inside DALI at that point aborts the process).
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from dataplane.producer import ProducedBatch


class _Failure:
    """An exception raised in the worker, to re-raise in the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()

#: Producers whose worker was started, by start order (outer producers first: a
#: cache-backed producer starts before the fresh producer its worker iterates).
_LIVE: weakref.WeakValueDictionary[int, BackgroundProducer] = weakref.WeakValueDictionary()
_STARTS = itertools.count()
_EXIT_HOOK_LOCK = threading.Lock()
_exit_hook_registered = False


def close_all_at_exit() -> None:
    """Close every producer whose worker may still run (stops and joins the workers,
    which releases their pipelines). Idempotent."""
    for _, producer in sorted(_LIVE.items()):
        producer.close()


def register_exit_hook() -> None:
    """Register :func:`close_all_at_exit` with :mod:`atexit`, once.

    Hooks run last-registered first: call this after importing a library whose
    own exit hook must find the workers stopped (DALI's ``_shutdown_pipelines``).
    """
    global _exit_hook_registered
    with _EXIT_HOOK_LOCK:
        if not _exit_hook_registered:
            atexit.register(close_all_at_exit)
            _exit_hook_registered = True


class BackgroundProducer:
    """Base of producers that run :meth:`_run` on a worker thread (see module docs).

    Parameters
    ----------
    prefetch : int
        Items the worker may have waiting for the consumer (at least 1).
    thread_name : str
        Name of the worker thread (shown in debuggers and ``threading.enumerate``).
    """

    def __init__(self, *, prefetch: int, thread_name: str) -> None:
        self._thread_name = thread_name
        self._stop = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, prefetch))
        self._thread: threading.Thread | None = None

    # -- hooks for subclasses ------------------------------------------------------
    def _run(self) -> bool:
        """Produce every item with :meth:`_put`; True if the pass ran to its end."""
        raise NotImplementedError

    def _cleanup(self) -> None:
        """Called on the worker thread when it stops, however it stops."""

    def _deliver(self, item: Any) -> ProducedBatch:
        """The batch an item carries (the item itself by default)."""
        return item  # type: ignore[no-any-return]

    def _release(self, item: Any) -> None:
        """The consumer is done with ``item`` (it asked for the next one)."""

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker (it finishes the item it is on) and join it. Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            while thread.is_alive():
                self._drain()
                thread.join(timeout=0.05)
            self._drain()

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def __del__(self) -> None:
        self.close()

    def __iter__(self) -> Iterator[ProducedBatch]:
        if self._thread is not None:
            raise RuntimeError(f"a {type(self).__name__} iterates once; create a new one")
        self._thread = threading.Thread(target=self._work, name=self._thread_name, daemon=True)
        _LIVE[next(_STARTS)] = self
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield self._deliver(item)
                self._release(item)
        finally:
            self.close()

    # -- worker side ---------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """True once the consumer asked the worker to stop."""
        return self._stop.is_set()

    def _put(self, item: Any) -> bool:
        """Queue ``item`` for the consumer; False if asked to stop meanwhile."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        try:
            if self._run():
                self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            self._put(_Failure(exc))
        finally:
            self._cleanup()
