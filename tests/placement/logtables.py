"""Small placement log tables that conform to the schema, for unit tests of the model side.

The files' density follows a known rule (stage sets the lifetime, size varies, shuffle
files have more operations) plus noise, so a model can learn it and tests can check
that it did. Runs follow each other in time, as the workload suite runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from placement.schema import SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY

STAGE_LIFETIME_S = {"load": 0.05, "shuffle-p2p": 0.5, "aggregate": 5.0}


def make_log(
    *,
    pipelines: int = 4,
    runs: int = 4,
    files_per_stage: int = 20,
    seed: int = 0,
    start: float = 1_700_000_000.0,
) -> pa.Table:
    """A log table: ``pipelines`` x ``runs`` sequential runs x 3 stages x ``files_per_stage``
    files."""
    rng = np.random.default_rng(seed)
    rows = []
    t = start
    for r in range(runs):
        for p in range(pipelines):
            run_id = f"pipe{p}-run{r}"
            pipe_factor = 1.0 + 0.5 * p  # pipelines differ in lifetime scale
            for s, (stage, life) in enumerate(STAGE_LIFETIME_S.items()):
                kind = "shuffle" if stage == "shuffle-p2p" else "spill"
                for i in range(files_per_stage):
                    size = int(10 ** rng.uniform(4, 7))
                    lifetime = life * pipe_factor * float(np.exp(rng.normal(0, 0.3)))
                    created = t + s * 2.0 + rng.uniform(0, 1.5)
                    writes = 12 if kind == "shuffle" else 1
                    reads = 1
                    rows.append(
                        {
                            "file_id": f"{run_id}-{stage}-{i}",
                            "pipeline": f"pipe{p}",
                            "run_id": run_id,
                            "stage": stage,
                            "job_id": run_id,
                            "worker": f"tcp://127.0.0.1:{4000 + i % 2}",
                            "host": "h",
                            "created_at": created,
                            "file_kind": kind,
                            "operator": "shuffle" if kind == "shuffle" else "groupby",
                            "expected_size_bytes": int(size * rng.uniform(0.9, 1.1)),
                            "n_partitions_in": 12,
                            "n_partitions_out": 12,
                            "input_bytes": 50_000_000 * (p + 1),
                            "priority": s * 100 + i,
                            "memory_pressure": 0.5,
                            "n_workers": 2,
                            "reuse_distance": None if kind == "shuffle" else i - 3,
                            "n_dependents": None if kind == "shuffle" else i % 3,
                            "deleted_at": created + lifetime,
                            "size_bytes": size,
                            "read_ops": reads,
                            "write_ops": writes,
                            "read_bytes": size * reads,
                            "write_bytes": size,
                            "tier": "hdd",
                        }
                    )
            t += 60.0  # next run starts after this one ended
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table.replace_schema_metadata({SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})


def merge_by_hand(directory: Path, sources: list[Path], name: str) -> Path:
    """A merged log file of ``sources`` as compaction writes it (metadata written out here,
    so that the reader-side rule is tested on its own), the sources left beside it: a
    compaction stopped between its rename and its deletes."""
    tables, parts, first = [], [], 0
    for source in sources:
        table = pq.read_table(source)
        parts.append([source.name, first, table.num_rows, source.stat().st_size])
        tables.append(table.replace_schema_metadata(None))
        first += table.num_rows
    metadata = {
        SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode(),
        b"dataplane.placement.compacted_from": json.dumps(parts).encode(),
    }
    path = directory / name
    pq.write_table(pa.concat_tables(tables).replace_schema_metadata(metadata), path)
    return path
