"""trainers.fit on real Fashion-MNIST: an in-memory resumable loader, and dataplane.Loader."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainers.helpers import ArrayLoader, InterruptingLoader
from trainers import (
    CheckpointError,
    RunRecord,
    Schedule,
    SwitchRule,
    TrainerConfigError,
    fit,
)
from trainers.models import SmallCNN


def _model(seed: int = 0) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN(10, 1, width=8)


def _loaders(arrays, batch_size: int = 128):
    train = ArrayLoader(*arrays["train"], batch_size=batch_size, seed=1)
    val = ArrayLoader(*arrays["val"], batch_size=256, shuffle=False, augment=False)
    return train, val


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _cosine(epochs: int):
    return lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)


def _fit_sgd(model: torch.nn.Module, train, val, epochs: int, **kwargs):
    """``fit`` with the SGD optimizer and cosine schedule the resume tests compare under."""
    return fit(
        model,
        train,
        val,
        epochs=epochs,
        optimizer=_sgd(model),
        lr_scheduler=_cosine(epochs),
        **kwargs,
    )


def test_fit_learns_and_writes_run_json(fmnist_arrays, tmp_path: Path) -> None:
    train, val = _loaders(fmnist_arrays, batch_size=32)
    model = _model()
    result = fit(
        model,
        train,
        val,
        epochs=3,
        optimizer=_sgd(model),
        target_accuracy=0.5,
        run_dir=tmp_path,
        run_name="fresh-small",
    )
    rec = json.loads((tmp_path / "run.json").read_text())
    assert rec["name"] == "fresh-small" and rec["schedule"] == "fresh"
    assert rec["status"] == "completed"
    assert [e["epoch"] for e in rec["epochs"]] == [0, 1, 2]
    assert all(e["phase"] == "fresh" for e in rec["epochs"])
    # Real learning on real labels: far above the 10% of chance after 3 short epochs
    # (about 0.6 measured; the tiny model's BatchNorm statistics make it noisy).
    assert rec["final_accuracy"] > 0.4
    assert rec["final_accuracy"] == result.record.final_accuracy
    for e in rec["epochs"]:
        assert e["steps"] == len(train) and e["samples"] == len(train) * 32
        assert e["data_wait_s"] > 0 and e["compute_s"] > 0
        assert e["data_wait_s"] + e["compute_s"] <= e["train_s"] + 1e-6
        assert 0 < e["input_share"] < 1
    elapsed = [e["elapsed_s"] for e in rec["epochs"]]
    assert elapsed == sorted(elapsed) and rec["elapsed_s"] == elapsed[-1]
    # time to target is the elapsed time of the first epoch reaching it
    first = next(e for e in rec["epochs"] if e["val_accuracy"] >= 0.5)
    assert rec["time_to_target_s"] == first["elapsed_s"]
    assert rec["train_time_to_target_s"] == first["train_elapsed_s"]
    train_clock = [e["train_elapsed_s"] for e in rec["epochs"]]
    assert train_clock[-1] == pytest.approx(sum(e["train_s"] for e in rec["epochs"]))
    assert all(t < w for t, w in zip(train_clock, elapsed, strict=True))  # validation is left out
    assert rec["epoch_to_target"] == first["epoch"]


def test_unreached_target_reports_none(fmnist_arrays) -> None:
    train, val = _loaders(fmnist_arrays)
    result = fit(_model(), train, val, epochs=1, target_accuracy=1.0)
    assert result.record.time_to_target_s is None
    assert result.record.epoch_to_target is None


def test_stop_at_target(fmnist_arrays) -> None:
    train, val = _loaders(fmnist_arrays)
    result = fit(_model(), train, val, epochs=5, target_accuracy=0.2, stop_at_target=True)
    assert result.record.status == "target_reached"
    assert len(result.record.epochs) < 5


def test_perfect_uses_cached_loader_then_fresh_loader(fmnist_arrays) -> None:
    cached, val = _loaders(fmnist_arrays)
    fresh = ArrayLoader(*fmnist_arrays["train"], batch_size=128, seed=2)
    result = fit(
        _model(),
        cached,
        val,
        schedule="perfect",
        fresh_loader=fresh,
        epochs=4,
        switch_rule=SwitchRule(patience=10, budget_fraction=0.5),
    )
    assert cached.epochs_seen == [0, 1]
    assert fresh.epochs_seen == [2, 3]
    assert [e.phase for e in result.record.epochs] == ["cached", "cached", "fresh", "fresh"]
    assert result.record.switch_epoch == 2 and result.record.switch_reason == "budget"


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k, value in a.items():
        assert torch.equal(value, b[k]), f"{k} differs"


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def test_resume_at_epoch_boundary_is_exact(fmnist_arrays, tmp_path: Path, deterministic) -> None:
    epochs = 2
    # straight: 2 epochs
    train, val = _loaders(fmnist_arrays)
    straight = _model()
    _fit_sgd(straight, train, val, epochs)
    # 1 epoch, stop (simulated by a process that ran only epoch 0), then resume
    train, val = _loaders(fmnist_arrays)
    first = _model()
    interrupted = InterruptingLoader(
        *fmnist_arrays["train"], batch_size=128, seed=1, interrupt_at=(1, 0)
    )
    with pytest.raises(KeyboardInterrupt):
        _fit_sgd(first, interrupted, val, epochs, checkpoint_dir=tmp_path)
    state = torch.load(tmp_path / "last.pt", weights_only=False)
    assert state["epoch"] == 1 and state["tally"]["steps"] == 0  # epoch-end checkpoint only
    # A new process: new model (different init), new optimizer and loaders.
    torch.manual_seed(123)
    np.random.seed(123)
    train, val = _loaders(fmnist_arrays)
    resumed = _model(seed=99)
    result = _fit_sgd(resumed, train, val, epochs, checkpoint_dir=tmp_path, resume=True)
    _assert_same_weights(_state(straight), _state(resumed))
    assert [e.epoch for e in result.record.epochs] == [0, 1]
    assert train.epochs_seen == [1]


def test_mid_epoch_interrupt_checkpoint_resumes_exactly(
    fmnist_arrays, tmp_path: Path, deterministic
) -> None:
    epochs = 2
    train, val = _loaders(fmnist_arrays)
    straight = _model()
    _fit_sgd(straight, train, val, epochs)

    run_dir = tmp_path / "run"
    ckpt = tmp_path / "ckpt"
    loader = InterruptingLoader(
        *fmnist_arrays["train"], batch_size=128, seed=1, interrupt_at=(1, 5)
    )
    _, val = _loaders(fmnist_arrays)
    model = _model()
    with pytest.raises(KeyboardInterrupt):
        _fit_sgd(model, loader, val, epochs, checkpoint_dir=ckpt, run_dir=run_dir)
    state = torch.load(ckpt / "last.pt", weights_only=False)
    assert state["epoch"] == 1 and state["tally"]["steps"] == 5
    assert state["loader_state"] == {"epoch": 1, "position": 5, "seed": 1}
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"

    train, val = _loaders(fmnist_arrays)
    resumed = _model(seed=7)
    result = _fit_sgd(
        resumed, train, val, epochs, checkpoint_dir=ckpt, resume=True, run_dir=run_dir
    )
    _assert_same_weights(_state(straight), _state(resumed))
    last = result.record.epochs[-1]
    assert last.steps == len(train)  # 5 before the interrupt + the remaining ones
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_resume_without_checkpoint_starts_fresh(fmnist_arrays, tmp_path: Path) -> None:
    train, val = _loaders(fmnist_arrays)
    result = fit(_model(), train, val, epochs=1, checkpoint_dir=tmp_path, resume=True)
    assert len(result.record.epochs) == 1
    assert (tmp_path / "last.pt").is_file()


def test_resume_with_other_settings_is_refused(fmnist_arrays, tmp_path: Path) -> None:
    train, val = _loaders(fmnist_arrays)
    fit(_model(), train, val, epochs=1, checkpoint_dir=tmp_path)
    before = (tmp_path / "last.pt").read_bytes()
    with pytest.raises(CheckpointError, match="epochs 1 .this run: 3."):
        fit(_model(), train, val, epochs=3, checkpoint_dir=tmp_path, resume=True)
    from trainers.models import PatchifyCNN

    with pytest.raises(CheckpointError, match="model 'SmallCNN'"):
        fit(PatchifyCNN(10, 1, patch=4), train, val, epochs=1, checkpoint_dir=tmp_path, resume=True)
    assert (tmp_path / "last.pt").read_bytes() == before  # nothing stored is lost


def test_corrupt_checkpoint_is_a_clear_error(fmnist_arrays, tmp_path: Path) -> None:
    (tmp_path / "last.pt").write_bytes(b"not a checkpoint")
    train, val = _loaders(fmnist_arrays)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        fit(_model(), train, val, epochs=1, checkpoint_dir=tmp_path, resume=True)


class _NoState:
    def __iter__(self):
        return iter([])

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"target_accuracy": 90}, "target_accuracy must be a fraction"),
        ({"schedule": "perfect"}, "needs fresh_loader"),
        ({"schedule": "sometimes"}, "unknown schedule 'sometimes'"),
        ({"resume": True}, "resume=True needs checkpoint_dir"),
        ({"stop_at_target": True}, "stop_at_target=True needs target_accuracy"),
        ({"device": "tpu"}, "device must be"),
    ],
)
def test_bad_arguments_are_named(fmnist_arrays, kwargs, match) -> None:
    train, val = _loaders(fmnist_arrays)
    with pytest.raises(TrainerConfigError, match=match):
        fit(_model(), train, val, **kwargs)


def test_loader_without_the_protocol_is_named(fmnist_arrays) -> None:
    _, val = _loaders(fmnist_arrays)
    with pytest.raises(TrainerConfigError, match="train_loader .*lacks set_epoch, state_dict"):
        fit(_model(), _NoState(), val, epochs=1)


def test_fresh_loader_with_fresh_schedule_is_refused(fmnist_arrays) -> None:
    train, val = _loaders(fmnist_arrays)
    with pytest.raises(TrainerConfigError, match="only used by schedule 'perfect'"):
        fit(_model(), train, val, schedule=Schedule.FRESH, fresh_loader=train)


class _ValInterrupt(ArrayLoader):
    """A validation loader whose first pass raises KeyboardInterrupt (Ctrl-C during validation)."""

    armed = True

    def __iter__(self):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return super().__iter__()


def test_interrupt_during_validation_resumes_into_validation(
    fmnist_arrays, tmp_path: Path, deterministic
) -> None:
    epochs = 2
    train, val = _loaders(fmnist_arrays)
    straight = _model()
    fit(straight, train, val, epochs=epochs, optimizer=_sgd(straight))

    train, _ = _loaders(fmnist_arrays)
    val = _ValInterrupt(*fmnist_arrays["val"], batch_size=256, shuffle=False, augment=False)
    model = _model()
    with pytest.raises(KeyboardInterrupt):
        fit(model, train, val, epochs=epochs, optimizer=_sgd(model), checkpoint_dir=tmp_path)
    state = torch.load(tmp_path / "last.pt", weights_only=False)
    assert state["epoch"] == 0 and state["tally"]["steps"] == len(train)
    assert state["loader_state"] is None  # the pass is complete: nothing left to replay

    train, val = _loaders(fmnist_arrays)
    resumed = _model(seed=5)
    result = fit(
        resumed,
        train,
        val,
        epochs=epochs,
        optimizer=_sgd(resumed),
        checkpoint_dir=tmp_path,
        resume=True,
    )
    assert train.epochs_seen == [1]  # epoch 0 was only validated, not trained again
    assert [e.steps for e in result.record.epochs] == [len(train), len(train)]
    _assert_same_weights(_state(straight), _state(resumed))


def test_resume_with_changed_training_settings_is_refused(fmnist_arrays, tmp_path: Path) -> None:
    train, val = _loaders(fmnist_arrays)

    def run(lr: float = 0.05, target: float = 0.05, patience: int = 2, seed: int = 0, **kw):
        model = _model()
        return fit(
            model,
            train,
            val,
            epochs=1,
            optimizer=torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
            target_accuracy=target,
            switch_rule=SwitchRule(patience=patience),
            checkpoint_dir=tmp_path / "ckpt",
            run_dir=tmp_path,
            settings={"batch_size": 128, "seed": seed},
            **kw,
        )

    first = run()
    assert first.record.extra["batch_size"] == 128 and first.record.extra["seed"] == 0
    assert first.record.extra["optimizer"]["lr"] == 0.05
    ckpt = (tmp_path / "ckpt" / "last.pt").read_bytes()
    record = (tmp_path / "run.json").read_text()
    cases = [
        ({"lr": 0.5}, r"optimizer.lr \(--lr\): 0.05 in the checkpoint, 0.5 in this run"),
        ({"target": 0.9}, r"target_accuracy \(--target-accuracy\): 0.05 in the checkpoint, 0.9"),
        ({"patience": 5}, r"switch_rule.patience \(--patience\): 2 in the checkpoint, 5"),
        ({"seed": 7}, "seed: 0 in the checkpoint, 7 in this run"),
    ]
    for kwargs, match in cases:
        with pytest.raises(CheckpointError, match=match) as info:
            run(resume=True, **kwargs)
        assert "new run directory (--run-dir)" in str(info.value)
    # nothing stored is touched by a refused resume
    assert (tmp_path / "ckpt" / "last.pt").read_bytes() == ckpt
    assert (tmp_path / "run.json").read_text() == record
    # the same settings resume; options that do not change the training may differ
    run(resume=True, progress=True)


def test_run_json_is_strict_json_and_a_diverged_loss_warns_once(
    fmnist_arrays, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train, val = _loaders(fmnist_arrays)
    ce = torch.nn.CrossEntropyLoss()

    def diverged(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return ce(out, labels) * float("nan")

    with caplog.at_level("WARNING", logger="trainers.fit"):
        fit(_model(), train, val, epochs=2, loss_fn=diverged, run_dir=tmp_path)
    assert sum("training loss is nan" in r.getMessage() for r in caplog.records) == 1

    def strict(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    rec = json.loads((tmp_path / "run.json").read_text(), parse_constant=strict)
    assert rec["epochs"][0]["train_loss"] is None and rec["epochs"][0]["val_loss"] is None


@pytest.mark.parametrize(
    ("key", "value"),
    [("lr", float("nan")), ("lr", float("inf")), ("lr", -0.1), ("weight_decay", float("nan"))],
)
def test_non_finite_or_negative_lr_and_weight_decay_are_refused(
    fmnist_arrays, key: str, value: float
) -> None:
    train, val = _loaders(fmnist_arrays)
    model = _model()
    optimizer = _sgd(model)
    optimizer.param_groups[0][key] = value
    option = "--" + key.replace("_", "-")
    with pytest.raises(TrainerConfigError, match=f"optimizer {key} must be a finite number >= 0"):
        fit(model, train, val, epochs=1, optimizer=optimizer)
    with pytest.raises(TrainerConfigError, match=option):
        fit(model, train, val, epochs=1, optimizer=optimizer)


class _FailingLoader(ArrayLoader):
    """Raises OSError in the middle of epoch 1 (a disk going away)."""

    def __iter__(self):
        for k, batch in enumerate(super().__iter__()):
            if self.epoch == 1 and k == 2:
                raise OSError("disk went away while reading a batch")
            yield batch


def test_a_run_that_dies_is_recorded_as_failed(fmnist_arrays, tmp_path: Path) -> None:
    train = _FailingLoader(*fmnist_arrays["train"], batch_size=128, seed=1)
    _, val = _loaders(fmnist_arrays)
    with pytest.raises(OSError, match="disk went away"):
        fit(_model(), train, val, epochs=3, run_dir=tmp_path)
    rec = json.loads((tmp_path / "run.json").read_text())
    assert rec["status"] == "failed"
    assert rec["error"] == "OSError: disk went away while reading a batch"
    assert len(rec["epochs"]) == 1


def test_resuming_a_run_that_stopped_at_its_target(fmnist_arrays, tmp_path: Path) -> None:
    def run(stop_at_target: bool, resume: bool = True):
        train, val = _loaders(fmnist_arrays)
        model = _model()
        result = fit(
            model,
            train,
            val,
            epochs=3,
            optimizer=_sgd(model),
            target_accuracy=0.05,
            stop_at_target=stop_at_target,
            checkpoint_dir=tmp_path / "ckpt",
            run_dir=tmp_path,
            resume=resume,
        )
        return result, train

    first, _ = run(stop_at_target=True, resume=False)
    assert first.record.status == "target_reached" and len(first.record.epochs) == 1
    again, train = run(stop_at_target=True)
    assert train.epochs_seen == []  # nothing trained again
    assert again.record.status == "target_reached" and len(again.record.epochs) == 1
    assert RunRecord.read(tmp_path).status == "target_reached"
    # without stop_at_target the run trains its remaining epochs
    rest, train = run(stop_at_target=False)
    assert train.epochs_seen == [1, 2]
    assert rest.record.status == "completed" and len(rest.record.epochs) == 3


def test_run_json_and_checkpoint_follow_the_umask(fmnist_arrays, tmp_path: Path) -> None:
    train, val = _loaders(fmnist_arrays)
    old = os.umask(0o022)
    try:
        fit(_model(), train, val, epochs=1, checkpoint_dir=tmp_path / "ckpt", run_dir=tmp_path)
        os.umask(0o027)
        RunRecord.read(tmp_path).write(tmp_path / "again")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "ckpt" / "last.pt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "again" / "run.json").stat().st_mode) == 0o640


class _SeenSamples(torch.nn.Module):
    """A model that notes every training sample it is given, by the bytes of its image."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.seen: list[bytes] = []
        self.sigint_at_step: int | None = None

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.extend(row.numpy().tobytes() for row in images)
            step = len(self.seen) // int(images.shape[0]) - 1
            if step == self.sigint_at_step:
                # Ctrl-C during a step: fit finishes the step, then stops with a checkpoint.
                signal.raise_signal(signal.SIGINT)
        return self.inner(images)


def test_sigint_mid_epoch_with_the_dataplane_loader_resumes_the_remaining_samples(
    png_folder: Path, tmp_path: Path
) -> None:
    """Interrupted + resumed through ``dataplane.Loader``'s state: one epoch's samples, in order.

    The ``eval`` recipe does not augment, so a sample's image bytes identify it.
    """
    from dataplane import Loader

    def loaders() -> tuple[Loader, Loader]:
        options = {"size": 28, "channels": 1, "device": "cpu"}
        train = Loader(
            png_folder / "train", batch_size=20, recipe="eval", shuffle=True, seed=3, **options
        )
        val = Loader(png_folder / "test", batch_size=50, recipe="eval", **options)
        return train, val

    def run(model: _SeenSamples, **kwargs):
        train, val = loaders()
        return fit(model, train, val, epochs=2, device="cpu", **kwargs)

    straight = _SeenSamples(_model())
    run(straight)
    number = {image: i for i, image in enumerate(dict.fromkeys(straight.seen))}

    def ids(seen: list[bytes]) -> list[int]:
        return [number[image] for image in seen]

    epoch0, epoch1 = ids(straight.seen[:200]), ids(straight.seen[200:])
    assert sorted(epoch0) == sorted(epoch1) == list(range(200))  # each sample once per epoch
    assert epoch0 != epoch1  # shuffled anew: a resume into the wrong epoch would show

    ckpt = tmp_path / "ckpt"
    interrupted = _SeenSamples(_model())
    interrupted.sigint_at_step = 10 + 3  # the 4th of epoch 1's 10 batches
    with pytest.raises(KeyboardInterrupt):
        run(interrupted, checkpoint_dir=ckpt)
    state = torch.load(ckpt / "last.pt", weights_only=False)
    assert state["epoch"] == 1 and state["tally"]["steps"] == 4
    assert state["loader_state"]["epoch"] == 1 and state["loader_state"]["batches_done"] == 4
    assert ids(interrupted.seen) == epoch0 + epoch1[:80]

    resumed = _SeenSamples(_model(seed=7))
    result = run(resumed, checkpoint_dir=ckpt, resume=True)
    assert ids(resumed.seen) == epoch1[80:]  # exactly the remaining samples, in order
    assert [e.steps for e in result.record.epochs] == [10, 10]
    assert result.record.status == "completed"
