"""The placement commands' ``LocalCluster``: no HTTP server unless asked for, and worker
processes that leave Ctrl-C to the process that started them."""

from __future__ import annotations

import os
import signal

import dask
import pytest

from placement.local_cluster import WORKER_PRELOAD, WORKER_PRELOAD_KEY, local_cluster

pytestmark = pytest.mark.timeout(120)


def sigint_ignored() -> bool:
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_worker_processes_ignore_sigint_and_the_scheduler_serves_no_http() -> None:
    from distributed import Client

    before = dask.config.get(WORKER_PRELOAD_KEY)
    # Python's own Ctrl-C handler here, whatever the runner was started with (a shell starts
    # background jobs with SIGINT ignored, and children would inherit that, preload or not).
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with (
            local_cluster(n_workers=1, threads_per_worker=1, memory_limit="512MiB") as cluster,
            Client(cluster) as client,
        ):
            assert list(client.run(sigint_ignored).values()) == [True]
            assert "dashboard" not in cluster.scheduler.services and cluster.dashboard_link == ""
            assert client.scheduler_info()["services"] == {}
            (first,) = client.run(os.getpid).values()
            client.restart(timeout=90)  # a new worker process from the same nanny: same preload
            (second,) = client.run(os.getpid).values()
            assert second != first and list(client.run(sigint_ignored).values()) == [True]
        assert dask.config.get(WORKER_PRELOAD_KEY) == before  # set only while the cluster runs
        # this process still takes Ctrl-C
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, original)


def test_workers_in_this_process_leave_its_sigint_alone() -> None:
    from distributed import Client

    handler = signal.getsignal(signal.SIGINT)
    with (
        local_cluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        assert WORKER_PRELOAD not in (dask.config.get(WORKER_PRELOAD_KEY) or [])
        assert client.scheduler_info()["services"]["dashboard"] > 0  # an address: a dashboard
    assert signal.getsignal(signal.SIGINT) is handler
