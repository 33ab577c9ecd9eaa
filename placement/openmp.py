"""OpenMP's wait policy for LightGBM on machines other work keeps busy.

LightGBM trains with OpenMP threads. A thread that reaches the end of a parallel loop
waits for the others; by libgomp's default it spins for a while first (300,000 turns,
``GOMP_SPINCOUNT``), and under ``OMP_WAIT_POLICY=ACTIVE`` it spins until they arrive. When
other processes keep the cores busy, the thread it waits for may not be running, and the
spinner burns the time slice that thread needs. A fit has thousands of such waits, so it
slows down many times over. Under ``OMP_WAIT_POLICY=PASSIVE`` a waiting thread sleeps at
once: a little slower on an idle machine, far faster on a busy one.
``benchmarks/openmp_wait.py`` measures the default and PASSIVE side by side, with and
without busy processes; the README gives its figures.

The policy is read once, when the OpenMP runtime is loaded (at the first ``import
lightgbm``, or ``import torch``, whose wheel ships its own ``libgomp.so.1``), so it must be
set before that. The commands that train models (``dataplane placement ...`` and
``dataplane report``) call :func:`prefer_passive_wait` first thing; a library user who
trains on a shared machine sets ``OMP_WAIT_POLICY=PASSIVE`` in the environment.
"""

from __future__ import annotations

import os

__all__ = ["WAIT_POLICY_VAR", "prefer_passive_wait"]

#: The environment variable OpenMP runtimes read their wait policy from.
WAIT_POLICY_VAR = "OMP_WAIT_POLICY"


def prefer_passive_wait() -> str:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the environment already sets a policy.

    Set in ``os.environ``, it reaches the OpenMP runtime loaded later in this process
    and every child process. A policy the user set is kept.

    Returns
    -------
    str
        The policy now in the environment (``"PASSIVE"``, or the user's own).
    """
    return os.environ.setdefault(WAIT_POLICY_VAR, "PASSIVE")
