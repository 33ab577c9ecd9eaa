"""Run trainers.fit on a slice of real Fashion-MNIST (used by the SIGINT and DDP tests).

Usage: python fit_fmnist.py FMNIST_DIR OUT_DIR [--resume] [--slow SECONDS] [--epochs N]

Writes OUT_DIR/started when the first batch is delivered, checkpoints to
OUT_DIR/ckpt and the run record to OUT_DIR/run. Under torchrun it initialises
a gloo process group; rank 0 then also writes OUT_DIR/ranks.json with a
checksum of every rank's final weights and its validation accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.trainers.helpers import ArrayLoader, load_fmnist
from trainers import fit
from trainers.models import SmallCNN


class SlowLoader(ArrayLoader):
    def __init__(self, *args, delay: float, marker: Path, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay = delay
        self.marker = marker

    def __iter__(self):
        for batch in super().__iter__():
            self.marker.touch()
            time.sleep(self.delay)
            yield batch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("fmnist")
    p.add_argument("out", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    train = load_fmnist(Path(args.fmnist), "train", limit=2048)
    val = load_fmnist(Path(args.fmnist), "t10k", limit=1024)
    loader = SlowLoader(*train, batch_size=64, seed=1, delay=args.slow, marker=args.out / "started")
    val_loader = ArrayLoader(*val, batch_size=256, shuffle=False, augment=False)
    model = SmallCNN(10, 1, width=8)
    args.out.mkdir(parents=True, exist_ok=True)
    result = fit(
        model,
        loader,
        val_loader,
        epochs=args.epochs,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        checkpoint_dir=args.out / "ckpt",
        run_dir=args.out / "run",
        resume=args.resume,
    )
    if dist.is_initialized():
        flat = torch.cat([p.detach().flatten() for p in result.model.parameters()])
        mine = {
            "rank": dist.get_rank(),
            "checksum": float(flat.double().sum()),
            "val_accuracy": result.record.final_accuracy,
            "batches": len(loader),
        }
        everyone: list[dict] = [None] * dist.get_world_size()  # type: ignore[list-item]
        dist.all_gather_object(everyone, mine)
        if dist.get_rank() == 0:
            (args.out / "ranks.json").write_text(json.dumps(everyone))
        # No rank tears its connections down while another still talks to it.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
