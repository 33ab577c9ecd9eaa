"""Saving a worker's log rows when its process is told to stop by a signal.

A Dask worker process ends abruptly in several ordinary ways: its nanny terminates it
when it exceeds ``distributed.worker.memory.terminate`` (SIGTERM to the worker process),
a supervisor stops the whole process group (systemd's default: SIGTERM to every process),
a terminal's Ctrl-C interrupts the whole foreground job (SIGINT). The default action of
SIGTERM ends the process on the spot, so the log rows its writer buffers and the rows of
its live temporary files were lost. :class:`SignalSaver` installs, in the main thread
(where Python runs signal handlers), a handler for SIGTERM and SIGINT that first saves
and then does what the previous handler did. By the previous handler:

* **The default action** (``SIG_DFL``: SIGTERM in a worker process), or a signal that
  ends the process whatever its handler does (``ending``: SIGINT in a worker process
  started by a nanny): the buffered rows are written, then the store is closed (every
  live file deleted, its row written) and the log closed; then the previous handler runs,
  or the default action, as if this handler had never been there (the process ends,
  killed by the signal).
* **Another Python handler** (``distributed`` closing the worker gracefully in
  ``dask worker --no-nanny``, Python's ``KeyboardInterrupt``): the buffered rows are
  written, then the previous handler runs; it may close the worker gracefully, which
  closes the store itself, or let the process go on.
* **Ignored** (``SIG_IGN``, as :mod:`placement.local_cluster` leaves SIGINT in its worker
  processes): no handler is installed.

SIGINT ends a worker process started by a nanny: Python's asyncio turns it into the
cancellation of the process's main task, which ends the process whether or not its
worker closes in time; when the whole process group is interrupted (Ctrl-C in the
terminal of ``dask worker``), the nanny asks the worker to close at the same moment, that
close does not finish, and the nanny kills the process 8 s later (``distributed``
2026.8): the store is closed by the handler, before that.

The saving runs in a thread of its own that the handler waits for at most
:data:`SAVE_TIMEOUT_S` seconds, so a lock held by the interrupted main thread or a hung
disk cannot keep the process from stopping; the buffered rows are written first, as the
nanny follows its SIGTERM with SIGKILL when the worker is still alive and over its memory
limit ~100 ms later (``distributed.worker.memory.monitor-interval``).

SIGKILL cannot be caught; see :mod:`placement.logwriter` for what it loses.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Collection
from types import FrameType
from typing import Any

from placement.storage.errors import StorageConfigError

logger = logging.getLogger(__name__)

#: Signals whose handler saves first.
SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
#: Most seconds a signal handler waits for the saving, in seconds.
SAVE_TIMEOUT_S = 2.0

_Handler = Callable[[int, FrameType | None], Any] | int | None


class SignalSaver:
    """Saves a worker's log rows when a signal stops its process (see the module docstring).

    Parameters
    ----------
    flush : callable
        Writes the buffered log rows (the process goes on).
    close : callable
        Writes the buffered rows, closes the store (rows of the live files) and the log:
        the process is about to end.
    ending : collection of int
        Signals that end the process whatever the previous handler does: ``close`` runs
        for them, before the previous handler.
    timeout_s : float
        Most seconds a handler waits for ``flush`` or ``close``.
    """

    def __init__(
        self,
        flush: Callable[[], object],
        close: Callable[[], object],
        *,
        ending: Collection[int] = (),
        timeout_s: float = SAVE_TIMEOUT_S,
    ) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise StorageConfigError(
                f"timeout_s={timeout_s!r} must be a positive number of seconds"
            )
        self._flush = flush
        self._close = close
        self.ending = frozenset(int(s) for s in ending)
        self.timeout_s = float(timeout_s)
        self._previous: dict[int, _Handler] = {}
        #: Uninstalled while another handler was on top of this one's: it saves nothing
        #: more, only passes the signal on, and is skipped when that one is restored.
        self._retired = False
        self._saving = False
        #: Signals handled so far (for tests and reports).
        self.handled = 0

    @property
    def installed(self) -> list[signal.Signals]:
        """Signals whose handler is this saver's."""
        return [signal.Signals(s) for s in self._previous]

    def install(self) -> list[signal.Signals]:
        """Install the handlers; return the signals handled.

        Only in the main thread (elsewhere Python cannot set a handler: nothing is
        installed). A signal that is ignored, or whose handler was not set from Python
        (and so could not be restored), is left alone.
        """
        if threading.current_thread() is not threading.main_thread():
            return []
        for sig in SIGNALS:
            if sig in self._previous:
                continue
            previous = signal.getsignal(sig)
            if previous is None or previous == signal.SIG_IGN:
                continue
            signal.signal(sig, self._handle)
            self._previous[sig] = previous
        return self.installed

    def uninstall(self) -> None:
        """Put the previous handlers back where this saver's is still installed.

        Only in the main thread. A handler set since on top of this one's (another
        saver's, or someone else's) is left in place; it may chain to this one, which
        from now on only passes the signal on to its own previous handler, and a saver
        restoring its previous handler skips this one's.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in list(self._previous.items()):
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, _past_retired(sig, previous))
                del self._previous[sig]
        self._retired = bool(self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> Any:
        # Runs in the main thread between two bytecodes of whatever it was doing: no
        # logging here (a log handler may be half-way through a write), no lock waited
        # for without a limit.
        previous = _past_retired(signum, self._previous.get(signum, signal.SIG_DFL))
        # a second signal while saving, or any signal once retired, goes straight on
        if not self._saving and not self._retired:
            self._saving = True
            try:
                self.handled += 1
                ending = previous == signal.SIG_DFL or signum in self.ending
                self._save(self._close if ending else self._flush)
            finally:
                self._saving = False
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_DFL:
            # the default action, as if this handler had never been there
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        return None

    def _save(self, work: Callable[[], object]) -> None:
        """Run ``work`` in a thread of its own; wait for it at most ``timeout_s`` seconds."""
        done = threading.Event()

        def run() -> None:
            try:
                work()
            except BaseException:
                logger.exception("saving the placement log rows at a stop signal failed")
            finally:
                done.set()

        thread = threading.Thread(target=run, name="placement-log-save", daemon=True)
        thread.start()
        if not done.wait(self.timeout_s):
            try:
                os.write(
                    2,
                    f"placement: saving the log rows at a stop signal took more than "
                    f"{self.timeout_s:g} s; going on without waiting\n".encode(),
                )
            except OSError:
                pass

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self.installed) or "nothing"
        return f"<SignalSaver handling {names}>"


def _past_retired(sig: int, handler: _Handler) -> _Handler:
    """``handler``, or where it would pass ``sig`` on if it is the handler of a saver
    uninstalled under another handler (see :meth:`SignalSaver.uninstall`)."""
    saver = getattr(handler, "__self__", None)
    while isinstance(saver, SignalSaver) and saver._retired:
        handler = saver._previous.get(sig, signal.SIG_DFL)
        saver = getattr(handler, "__self__", None)
    return handler
