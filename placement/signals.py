"""SIGTERM stops a placement command the way Ctrl-C does.

``kill <pid>``, a batch scheduler or a container runtime stop a process with SIGTERM, whose
default action ends it on the spot: no ``finally`` runs, so the command's temporary
directories and its cluster's scratch space stay behind. :func:`sigterm_raises` makes SIGTERM
raise an exception instead, as Ctrl-C raises :class:`KeyboardInterrupt`, so the command stops
through its ordinary clean-up. ``dataplane serve`` raises :class:`KeyboardInterrupt` itself
(a stop is how a service ends: status 0); ``dataplane placement collect`` raises
``SystemExit(143)`` (128 + SIGTERM, the status of a job killed by SIGTERM: its work is cut
short).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["sigterm_raises"]


@contextlib.contextmanager
def sigterm_raises(exception: Callable[[], BaseException]) -> Iterator[None]:
    """While the block runs, SIGTERM raises ``exception()`` in the main thread.

    Every SIGTERM received meanwhile raises (as every Ctrl-C does). Only in the main thread,
    where Python runs signal handlers (elsewhere the block runs unchanged); the previous
    handler is restored after.

    Parameters
    ----------
    exception : callable
        Makes the exception to raise, such as ``KeyboardInterrupt`` or
        ``functools.partial(SystemExit, 128 + signal.SIGTERM)``.

    Examples
    --------
    >>> import functools, signal
    >>> with sigterm_raises(functools.partial(SystemExit, 128 + signal.SIGTERM)):
    ...     pass  # `kill <pid>` here raises SystemExit(143)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise exception()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
