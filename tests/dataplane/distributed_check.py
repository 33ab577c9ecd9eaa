"""Shard check run in every process of a real ``torch.distributed`` (gloo) group.

Used by ``test_distributed.py`` (two processes via ``torch.multiprocessing``) and
runnable under ``torchrun --nproc_per_node 2 -m tests.dataplane.distributed_check DATA``.
Each rank iterates its shard with a Loader that finds rank and world size by
itself; rank 0 gathers every rank's samples and checks that the shards are
disjoint, together complete, and have equal batch counts.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any


def check_shards(data: str, *, epochs: int = 2, batch_size: int = 32) -> dict[str, Any] | None:
    """Iterate this rank's shard; on rank 0 return the verdict, elsewhere None."""
    import torch.distributed as dist

    from dataplane import Loader
    from dataplane.sources import ImageFolderSource
    from tests.dataplane.helpers import batch_keys, decoded_keys, identity_recipe

    loader = Loader(
        data,
        recipe=identity_recipe(),
        batch_size=batch_size,
        shuffle=True,
        seed=11,
        device="cpu",
        num_threads=1,
    )
    mine = {"rank": loader.plan.rank, "world_size": loader.plan.world_size, "epochs": []}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        batches = [batch_keys(x) for x, _ in loader]
        mine["epochs"].append(batches)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() != 0:
        return None
    source = ImageFolderSource(data)
    expected = decoded_keys(source.read(i) for i in range(len(source)))
    verdict: dict[str, Any] = {
        "world_size": dist.get_world_size(),
        "ranks_seen": sorted(g["rank"] for g in gathered),
        "epochs": [],
    }
    for epoch in range(epochs):
        per_rank = [g["epochs"][epoch] for g in gathered]
        sets = [Counter(k for batch in batches for k in batch) for batches in per_rank]
        together = sum(sets, Counter())
        overlap = sum(
            sum((sets[a] & sets[b]).values())
            for a in range(len(sets))
            for b in range(a + 1, len(sets))
        )
        verdict["epochs"].append(
            {
                "epoch": epoch,
                "batches_per_rank": [len(b) for b in per_rank],
                "samples_per_rank": [sum(s.values()) for s in sets],
                "overlap": overlap,
                "complete": together == expected,
                "dataset_size": sum(expected.values()),
            }
        )
    orders = [tuple(k for b in gathered[0]["epochs"][e] for k in b) for e in range(epochs)]
    verdict["orders_differ_between_epochs"] = len(set(orders)) == epochs
    return verdict


def spawn_worker(rank: int, world_size: int, port: int, data: str, out: str) -> None:
    """``torch.multiprocessing.spawn`` entry point."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        verdict = check_shards(data)
        if verdict is not None:
            Path(out).write_text(json.dumps(verdict))
    finally:
        dist.destroy_process_group()


def main() -> None:  # pragma: no cover - run under torchrun
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        verdict = check_shards(args.data, epochs=args.epochs)
        if verdict is not None:
            print(json.dumps(verdict, indent=1))
            ok = all(
                e["overlap"] == 0 and e["complete"] and len(set(e["batches_per_rank"])) == 1
                for e in verdict["epochs"]
            )
            print("SHARDS OK: disjoint, complete, equal batch counts" if ok else "SHARDS BROKEN")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    main()
