"""The placement service on a Dask cluster: its overhead, decision latency, memory and tier split.

Usage::

    python benchmarks/dask_service.py [--quick] [--repeats N] [--partitions P] [--rows R]

One run measures, on multi-process ``LocalCluster``s under tight memory (P2P shuffle,
``distributed.worker.memory.target`` 0.02, so the pipeline spills hard):

* **overhead**: the same spill- and shuffle-heavy dataframe pipeline
  (:func:`placement.service.demo.run_pipeline`: generate, P2P shuffle, persist, groupby)
  with plain Dask (Dask's own spill and shuffle files) and with the service (tiered
  spill and shuffle files, lease-based decisions by the LightGBM model, I/O logs),
  alternating plain/service ``--repeats`` times, each run on a fresh cluster after a
  warm-up; medians and the overhead of the service's median (goal <= 5%), and the CPU
  seconds the workers and the scheduler spent (less sensitive than wall time to other
  load on a shared machine);
* **decision latency**: per file on the worker (what a spill or shuffle write waits; on
  busy workers this includes waiting for the GIL), the same decision code in this idle
  process, the lease renewal round trip through the scheduler, and batched decisions
  answered by the scheduler (``placement_decide``, batches of 1 and 64), p50/p99;
* **memory per worker**: RSS of the worker processes after the warm-up and after the
  timed run (service minus plain, medians: the tiered store, its log writer, the link,
  the model and the modules they import), and the RSS one more copy of the predictor
  (model + history) takes on a worker (goal <= 100 MB);
* **tier split**: files, bytes and I/O per tier and file kind, from the service's logs.

The model is trained first, as in production, on the logs the service itself wrote
while running the pipeline on other data (seeds 0 and 1) without a model; timed runs
use seed 2. Both tier directories are on this machine's one disk: the numbers are the
service's cost, not an SSD's benefit.

Writes ``benchmarks/results/dask_service-<time>.json`` (and ``-latest``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# benchmarks/placement.py is named like the package: keep this folder off the import path
# while importing ``placement``, then add it back (at the end) for ``_common``
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
from placement.logwriter import read_logs
from placement.model import ModelParams, ModelSet
from placement.service import service_state, worker_link, worker_service_state
from placement.service.cli import split_table
from placement.service.demo import PipelineSpec, run_pipeline, settle, tier_split
from placement.service.local import ServeOptions, service_cluster, tight_memory

sys.path.append(str(_HERE))
from _common import format_table, machine_info, write_results

MiB = 2**20
MEMORY_LIMIT = "768MiB"


# ---------------------------------------------------------------------- on the workers
def worker_rss(dask_worker: Any = None) -> int:
    """RSS of this worker process, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def cpu_seconds(dask_worker: Any = None) -> float:
    """User + system CPU seconds this process has used."""
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def cluster_cpu(client: Any) -> float:
    """CPU seconds used so far by the workers and by this process (scheduler and client)."""
    return sum(client.run(cpu_seconds).values()) + cpu_seconds()


def chooser_latencies(dask_worker: Any) -> list[int]:
    """Decision latencies of this worker's chooser, in nanoseconds."""
    return worker_link(dask_worker).chooser.latencies_ns().tolist()


def renewal_rtts(dask_worker: Any) -> list[float]:
    """Lease renewal round trips of this worker, in seconds."""
    return worker_link(dask_worker).rtt_s().tolist()


def predictor_memory(dask_worker: Any, copies: int = 20) -> dict[str, int]:
    """RSS one more copy of the worker's predictor (model + history) takes, in bytes
    (``copies`` copies are loaded and the RSS growth divided, to see past page reuse)."""
    import gc

    import psutil

    from placement.service import Predictor

    payload = worker_link(dask_worker).chooser.predictor.to_bytes()
    gc.collect()
    before = psutil.Process().memory_info().rss
    kept = [Predictor.from_bytes(payload) for _ in range(copies)]
    for p in kept:  # set up each copy's fast single-row path too
        p.models.global_model.predict_one(
            np.zeros(len(p.models.global_model.metadata["feature_columns"]))
        )
    after = psutil.Process().memory_info().rss
    del kept
    return {"payload_bytes": len(payload), "rss_delta_bytes": int((after - before) / copies)}


def local_decision_ns(model_dir: str, n: int = 3000) -> list[int]:
    """Latency of ``LeasedChooser.choose`` with the trained model in this idle process, ns."""
    import math as _math

    from placement.features import HistoryStore
    from placement.service import LeasedChooser, Predictor
    from placement.storage import FileRequest

    logs = read_logs(Path(model_dir).parent / "logs").table
    predictor = Predictor(
        ModelSet.load(model_dir), HistoryStore.from_table(logs).snapshot(), version=1
    )
    chooser = LeasedChooser()
    chooser.install_predictor(predictor)
    chooser.accept(
        chooser.begin_sync(),
        allowance_bytes=2**40,
        threshold=-_math.inf,
        ttl_s=3600,
        model_version=1,
    )
    for i in range(n):
        chooser.choose(
            FileRequest(
                file_kind="spill",
                created_at=time.time(),
                pipeline="bench",
                stage="p2pshuffle",
                expected_size_bytes=1_000_000 + i,
                n_partitions_out=32,
                priority=i,
            )
        )
    return chooser.latencies_ns()[200:].tolist()


async def decide_rtts(dask_worker: Any, batch: int, rounds: int) -> list[float]:
    """Round trips of batched decision requests from this worker to the scheduler, in seconds."""
    facts = {
        "file_kind": "shuffle",
        "pipeline": "bench",
        "stage": "shuffle-p2p0",
        "operator": "shuffle",
        "expected_size_bytes": 4 * MiB,
        "n_partitions_out": 32,
    }
    out = []
    for _ in range(rounds):
        requests = [{**facts, "created_at": time.time()} for _ in range(batch)]
        start = time.perf_counter()
        await dask_worker.scheduler.placement_decide(worker=dask_worker.address, requests=requests)
        out.append(time.perf_counter() - start)
    return out


# ---------------------------------------------------------------------- clusters
def plain_cluster(root: Path) -> Any:
    import dask
    from distributed import LocalCluster

    class Plain:
        def __enter__(self) -> Any:
            self._cfg = dask.config.set(tight_memory())
            self._cfg.__enter__()
            self.cluster = LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                memory_limit=MEMORY_LIMIT,
                dashboard_address=None,
                local_directory=str(root / "plain-dask"),
            )
            return self.cluster

        def __exit__(self, *exc: object) -> None:
            self.cluster.close()
            self._cfg.__exit__(*exc)

    return Plain()


def options(root: Path, run: str, capacity: int, model: str | None) -> ServeOptions:
    return ServeOptions(
        ssd_dir=str(root / run / "ssd"),
        hdd_dir=str(root / run / "hdd"),
        log_dir=str(root / "logs"),
        ssd_capacity=capacity,
        model=model,
        n_workers=2,
        memory_limit=MEMORY_LIMIT,
        local_directory=str(root / run / "dask"),
        config=tight_memory(),
    )


def percentiles(values: Any, scale: float) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64) * scale
    if arr.size == 0:
        return {"n": 0}
    return {
        "n": int(arr.size),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
    }


def one_run(
    mode: str,
    root: Path,
    i: int,
    spec: PipelineSpec,
    capacity: int,
    model: str,
    measure_decide: bool,
) -> dict[str, Any]:
    from distributed import Client

    warm = PipelineSpec(partitions=4, rows=20_000, n_keys=1000, seed=9)
    verify = i == 0
    if mode == "plain":
        with plain_cluster(root) as cluster, Client(cluster) as client:
            run_pipeline(client, warm, tell_workers=False, verify=False)
            idle = list(client.run(worker_rss).values())
            cpu0 = cluster_cpu(client)
            result = run_pipeline(client, spec, pipeline="bench", tell_workers=False, verify=False)
            cpu = cluster_cpu(client) - cpu0
            rss = list(client.run(worker_rss).values())
            if verify:  # checked on a second run, outside the measurements
                run_pipeline(client, spec, tell_workers=False, verify=True)
        shutil.rmtree(root / "plain-dask", ignore_errors=True)
        return {
            "mode": mode,
            "wall_s": result.wall_s,
            "cpu_s": cpu,
            "verified": True if verify else None,
            "worker_rss": rss,
            "worker_rss_idle": idle,
        }
    run = f"service-{i}"
    with service_cluster(options(root, run, capacity, model)) as cluster, Client(cluster) as client:
        run_pipeline(client, warm, pipeline="bench-warmup", verify=False)
        settle(client)
        idle = list(client.run(worker_rss).values())
        client.run(lambda dask_worker: worker_link(dask_worker).chooser._latency.fill(0))
        client.run(lambda dask_worker: setattr(worker_link(dask_worker).chooser, "_n_latency", 0))
        cpu0 = cluster_cpu(client)
        result = run_pipeline(client, spec, pipeline="bench", verify=False)
        cpu = cluster_cpu(client) - cpu0
        rss = list(client.run(worker_rss).values())
        settle(client)
        lat = [x for xs in client.run(chooser_latencies).values() for x in xs]
        rtt = [x for xs in client.run(renewal_rtts).values() for x in xs]
        states = client.run(worker_service_state)
        out: dict[str, Any] = {
            "mode": mode,
            "run_id": result.run_id,
            "wall_s": result.wall_s,
            "cpu_s": cpu,
            "verified": None,
            "worker_rss": rss,
            "worker_rss_idle": idle,
            "decision_ns": lat,
            "renewal_s": rtt,
            "link_failures": sum(s["failures"] for s in states.values()),
            "decisions": [s["chooser"]["decisions"] for s in states.values()],
            "model": service_state(client)["model"],
        }
        if verify:  # checked on a second run, outside the measurements
            out["verified"] = run_pipeline(client, spec, pipeline="bench-check").verified
            settle(client)
        if measure_decide:
            out["decide_1_s"] = [
                x for xs in client.run(decide_rtts, batch=1, rounds=200).values() for x in xs
            ]
            out["decide_64_s"] = [
                x for xs in client.run(decide_rtts, batch=64, rounds=50).values() for x in xs
            ]
            out["predictor_memory"] = list(client.run(predictor_memory).values())
    shutil.rmtree(root / run, ignore_errors=True)
    return out


def train(root: Path, spec: PipelineSpec, capacity: int) -> tuple[str, dict[str, Any]]:
    """Run the pipeline under the service without a model, train on its logs."""
    from distributed import Client

    with (
        service_cluster(options(root, "train", capacity, None)) as cluster,
        Client(cluster) as client,
    ):
        for seed in (0, 1):
            run_pipeline(
                client,
                PipelineSpec(
                    partitions=spec.partitions, rows=spec.rows, n_keys=spec.n_keys, seed=seed
                ),
                pipeline="bench",
                verify=False,
            )
            settle(client)
    shutil.rmtree(root / "train", ignore_errors=True)
    table = read_logs(root / "logs").table
    start = time.perf_counter()
    models = ModelSet.fit(table, per_workload=False, params=ModelParams(n_estimators=100))
    model_dir = models.save(root / "model")
    return str(model_dir), {"rows": table.num_rows, "train_s": time.perf_counter() - start}


# ---------------------------------------------------------------------- report
def mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="A small smoke run (2 repeats, small data)."
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="Timed runs per mode (default 5; quick 2)."
    )
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--rows", type=int, default=None, help="Rows per partition.")
    parser.add_argument("--scratch", default=None, help="Parent of the scratch directory.")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    partitions = args.partitions or (12 if args.quick else 32)
    rows = args.rows or (100_000 if args.quick else 250_000)
    spec = PipelineSpec(partitions=partitions, rows=rows, n_keys=partitions * rows // 20, seed=2)
    capacity = spec.input_bytes // 4  # the SSD holds a quarter of the data
    logging.getLogger("distributed").setLevel(logging.ERROR)

    root = Path(tempfile.mkdtemp(prefix="bench-dask-service-", dir=args.scratch))
    started = time.perf_counter()
    try:
        print(
            f"pipeline: {partitions} x {rows} rows ({mb(spec.input_bytes)} MB), "
            f"SSD budget {mb(capacity)} MB, "
            f"{repeats} runs per mode",
            flush=True,
        )
        model_dir, training = train(root, spec, capacity)
        print(
            f"trained on {training['rows']} log rows of the service in {training['train_s']:.1f} s",
            flush=True,
        )
        runs: list[dict[str, Any]] = []
        for i in range(repeats):
            order = ("plain", "service") if i % 2 == 0 else ("service", "plain")
            for mode in order:
                load = os.getloadavg()[0]
                r = one_run(mode, root, i, spec, capacity, model_dir, measure_decide=(i == 0))
                r["load_1min_before"] = load
                runs.append(r)
                print(
                    f"  run {i} {mode:7s} {r['wall_s']:.2f} s, {r['cpu_s']:.1f} CPU s  "
                    f"(1-min load before: {load:.2f})",
                    flush=True,
                )
        plain = [r for r in runs if r["mode"] == "plain"]
        served = [r for r in runs if r["mode"] == "service"]
        med_plain = statistics.median(r["wall_s"] for r in plain)
        med_service = statistics.median(r["wall_s"] for r in served)
        overhead = med_service / med_plain - 1.0
        cpu_plain = statistics.median(r["cpu_s"] for r in plain)
        cpu_service = statistics.median(r["cpu_s"] for r in served)
        cpu_overhead = cpu_service / cpu_plain - 1.0

        decision = percentiles([x for r in served for x in r["decision_ns"]], 1e-3)  # us
        renewal = percentiles([x for r in served for x in r["renewal_s"]], 1e3)  # ms
        first = (
            served[0]
            if served[0].get("decide_1_s")
            else next(r for r in served if r.get("decide_1_s"))
        )
        decide1 = percentiles(first["decide_1_s"], 1e3)
        decide64 = percentiles(first["decide_64_s"], 1e3)
        rss_plain = statistics.median(x for r in plain for x in r["worker_rss"])
        rss_service = statistics.median(x for r in served for x in r["worker_rss"])
        idle_plain = statistics.median(x for r in plain for x in r["worker_rss_idle"])
        idle_service = statistics.median(x for r in served for x in r["worker_rss_idle"])
        local = percentiles(local_decision_ns(model_dir), 1e-3)  # us
        pmem = max(first["predictor_memory"], key=lambda m: m["rss_delta_bytes"])

        logs = read_logs(root / "logs").table.to_pandas()
        timed = logs[logs["run_id"].isin([r["run_id"] for r in served])]
        split = tier_split(timed)
        by_tier = tier_split(timed, by=("tier",))

        print()
        print("Wall time of the pipeline (persist + groupby), seconds, fresh cluster per run")
        print(
            format_table(
                ["mode", "runs", "median", "min", "max", "vs plain"],
                [
                    [
                        "plain Dask",
                        len(plain),
                        f"{med_plain:.2f}",
                        f"{min(r['wall_s'] for r in plain):.2f}",
                        f"{max(r['wall_s'] for r in plain):.2f}",
                        "1.000",
                    ],
                    [
                        "with service",
                        len(served),
                        f"{med_service:.2f}",
                        f"{min(r['wall_s'] for r in served):.2f}",
                        f"{max(r['wall_s'] for r in served):.2f}",
                        f"{med_service / med_plain:.3f}",
                    ],
                ],
            )
        )
        print(
            f"service overhead: {100 * overhead:+.1f}% of the median wall time (goal <= 5%: "
            f"{'met' if overhead <= 0.05 else 'MISSED'})"
        )
        print(
            "CPU seconds of the workers and the scheduler during the run (less sensitive to other "
            f"load on the machine), medians: plain {cpu_plain:.1f}, service {cpu_service:.1f} "
            f"-> {100 * cpu_overhead:+.1f}%"
        )
        print()
        print("Decision latency")
        print(
            format_table(
                ["path", "n", "p50", "p99", "unit"],
                [
                    [
                        "per file, on the busy workers (lease + model)",
                        decision["n"],
                        f"{decision['p50']:.1f}",
                        f"{decision['p99']:.1f}",
                        "us",
                    ],
                    [
                        "per file, same code in an idle process",
                        local["n"],
                        f"{local['p50']:.1f}",
                        f"{local['p99']:.1f}",
                        "us",
                    ],
                    [
                        "lease renewal through the scheduler",
                        renewal["n"],
                        f"{renewal['p50']:.2f}",
                        f"{renewal['p99']:.2f}",
                        "ms",
                    ],
                    [
                        "batched decide via scheduler, batch 1",
                        decide1["n"],
                        f"{decide1['p50']:.2f}",
                        f"{decide1['p99']:.2f}",
                        "ms",
                    ],
                    [
                        "batched decide via scheduler, batch 64",
                        decide64["n"],
                        f"{decide64['p50']:.2f}",
                        f"{decide64['p99']:.2f}",
                        "ms",
                    ],
                    [
                        "  = per decision in a batch of 64",
                        decide64["n"],
                        f"{1e3 * decide64['p50'] / 64:.1f}",
                        f"{1e3 * decide64['p99'] / 64:.1f}",
                        "us",
                    ],
                ],
            )
        )
        print()
        print("Memory per worker (MB)")
        print(
            format_table(
                ["measure", "value", "goal"],
                [
                    ["worker RSS after warm-up, plain (median)", mb(idle_plain), ""],
                    ["worker RSS after warm-up, with service (median)", mb(idle_service), ""],
                    ["  difference", mb(idle_service - idle_plain), "<= 100"],
                    ["worker RSS after the timed run, plain (median)", mb(rss_plain), ""],
                    ["worker RSS after the timed run, with service (median)", mb(rss_service), ""],
                    ["  difference", mb(rss_service - rss_plain), "<= 100"],
                    [
                        "predictor (model + history) loaded once more, RSS",
                        mb(pmem["rss_delta_bytes"]),
                        "<= 100",
                    ],
                    ["predictor payload shipped to each worker", mb(pmem["payload_bytes"]), ""],
                ],
            )
        )
        print()
        print("Split between tiers (timed service runs, from the service's logs)")
        totals = by_tier.assign(kind="all").set_index("kind", append=True)
        print(split_table(pd.concat([split, totals])))
        fallbacks = sum(d["fallback"] for r in served for d in r["decisions"])
        failures = sum(r["link_failures"] for r in served)
        print(
            f"decisions without a valid lease: {fallbacks}; failed renewals: {failures}; "
            f"model: {served[0]['model'].get('kind')} v{served[0]['model'].get('version')} "
            f"({served[0]['model'].get('trees')} trees); answers checked against pandas: "
            f"{all(r['verified'] for r in runs if r['verified'] is not None)}"
        )

        payload = {
            "settings": {
                "quick": args.quick,
                "repeats": repeats,
                "partitions": partitions,
                "rows": rows,
                "input_bytes": spec.input_bytes,
                "ssd_capacity_bytes": capacity,
                "memory_limit": MEMORY_LIMIT,
                "n_workers": 2,
                "target_fraction": 0.02,
            },
            "machine": machine_info(),
            "training": training,
            "load_1min_before": {
                "plain": [r["load_1min_before"] for r in plain],
                "service": [r["load_1min_before"] for r in served],
            },
            "cpu_s": {
                "plain": [r["cpu_s"] for r in plain],
                "service": [r["cpu_s"] for r in served],
                "median_plain": cpu_plain,
                "median_service": cpu_service,
                "overhead": cpu_overhead,
            },
            "wall_s": {
                "plain": [r["wall_s"] for r in plain],
                "service": [r["wall_s"] for r in served],
                "median_plain": med_plain,
                "median_service": med_service,
                "overhead": overhead,
                "goal_overhead_5pct": overhead <= 0.05,
            },
            "decision_latency": {
                "per_file_us": decision,
                "per_file_idle_process_us": local,
                "renewal_ms": renewal,
                "decide_batch1_ms": decide1,
                "decide_batch64_ms": decide64,
            },
            "memory": {
                "worker_rss_plain_bytes": rss_plain,
                "worker_rss_service_bytes": rss_service,
                "worker_rss_idle_plain_bytes": idle_plain,
                "worker_rss_idle_service_bytes": idle_service,
                "predictor": first["predictor_memory"],
                "goal_100MB": max(
                    rss_service - rss_plain, idle_service - idle_plain, pmem["rss_delta_bytes"]
                )
                <= 100e6,
            },
            "tier_split": split.reset_index().to_dict(orient="records"),
            "tier_totals": by_tier.reset_index().to_dict(orient="records"),
            "fallback_decisions": fallbacks,
            "failed_renewals": failures,
            "model": served[0]["model"],
            "bench_wall_s": time.perf_counter() - started,
        }
        path = write_results("dask_service", payload)
        print(f"wrote {path}")
        return payload
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
