"""Training loops and schedules (fresh, perfect, torch), small models, time-to-accuracy reports.

``trainers.fit(model, train_loader, val_loader, schedule=..., target_accuracy=...)``
trains any :class:`torch.nn.Module` on any resumable loader and writes
``run.json``; see :mod:`trainers.fit` and :mod:`trainers.schedule`.
"""

from __future__ import annotations

from trainers.errors import CheckpointError, RunRecordError, TrainerConfigError, TrainerError
from trainers.fit import FitResult, fit
from trainers.models import MODEL_NAMES, build_model
from trainers.run_record import EpochRecord, RunRecord
from trainers.schedule import Phase, PhaseController, Schedule, SwitchReason, SwitchRule

__all__ = [
    "MODEL_NAMES",
    "CheckpointError",
    "EpochRecord",
    "FitResult",
    "Phase",
    "PhaseController",
    "RunRecord",
    "RunRecordError",
    "Schedule",
    "SwitchReason",
    "SwitchRule",
    "TrainerConfigError",
    "TrainerError",
    "build_model",
    "fit",
]
