"""Sharding across a real two-process torch.distributed (gloo) group."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch.multiprocessing as mp

from tests.dataplane.distributed_check import spawn_worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_processes_get_disjoint_complete_equal_shards(
    fmnist_small: Path, tmp_path: Path
) -> None:
    out = tmp_path / "verdict.json"
    mp.spawn(
        spawn_worker,
        args=(2, _free_port(), str(fmnist_small / "train"), str(out)),
        nprocs=2,
        join=True,
    )
    verdict = json.loads(out.read_text())
    assert verdict["world_size"] == 2 and verdict["ranks_seen"] == [0, 1]
    for epoch in verdict["epochs"]:
        assert epoch["overlap"] == 0, "shards are disjoint"
        assert epoch["complete"], "shards together hold every sample"
        assert epoch["batches_per_rank"] == [5, 5]  # 300 samples, 2 ranks x 32
        assert sum(epoch["samples_per_rank"]) == 300
    assert verdict["orders_differ_between_epochs"]
