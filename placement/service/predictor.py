"""What the service predicts for a new file: its log10 I/O density, from creation-time facts.

A :class:`Predictor` bundles the trained models (:class:`~placement.model.ModelSet`),
the history statistics they read (:class:`~placement.features.HistorySnapshot`) and a
version number. The scheduler builds one when it starts and on every model reload,
and ships it (pickled, once per version) to each worker, which predicts locally.

Without a model the predictor falls back to the size heuristic of
:class:`~placement.policy.SmallFilesFirstPolicy`: ``-log10(size)`` (a file's operation
count varies much less than its size, so smaller files are denser).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from placement.errors import ModelError, PlacementTypeError
from placement.features import HistorySnapshot, features_from_request, size_estimate
from placement.model import ModelSet
from placement.service.errors import ServiceConfigError
from placement.storage.request import FileRequest


class Predictor:
    """Predicted log10 density (operations per byte per second) of new files.

    Parameters
    ----------
    models : ModelSet, optional
        Trained models; ``None`` uses the size heuristic.
    history : HistorySnapshot, optional
        History statistics of earlier runs for the models' history features.
    version : int
        Increases with every model the service loads (0: none loaded).
    source : str, optional
        Where the models were loaded from (for reports).
    """

    def __init__(
        self,
        models: ModelSet | None = None,
        history: HistorySnapshot | None = None,
        *,
        version: int = 0,
        source: str | None = None,
    ) -> None:
        if models is not None and not isinstance(models, ModelSet):
            raise PlacementTypeError(
                f"models must be a ModelSet or None, got {type(models).__name__}"
            )
        if not isinstance(version, int) or version < 0:
            raise ServiceConfigError(f"version={version!r} must be an int >= 0")
        self.models = models
        self.history = history
        self.version = version
        self.source = source

    @property
    def kind(self) -> str:
        """``lightgbm`` with models, ``size-heuristic`` without."""
        return "lightgbm" if self.models is not None else "size-heuristic"

    def expected_size(self, request: FileRequest) -> int | None:
        """Bytes ``request``'s file is expected to reach, in bytes; ``None`` if unknown.

        The request's ``expected_size_bytes`` corrected by the history of earlier runs
        (:func:`~placement.features.size_estimate`), the size the simulator's policies
        reserve; without history, the request's own expected size.
        """
        declared = request.expected_size_bytes
        if self.history is None:
            return int(declared) if declared is not None else None
        kind, op = request.file_kind, request.operator
        hist = self.history.lookup(request.pipeline, request.stage, str(kind or ""), str(op or ""))
        log_expected = math.log10(max(int(declared), 1)) if declared is not None else math.nan
        log_size = size_estimate(log_expected, hist)
        return round(10.0**log_size) if log_size == log_size else None

    def predict(self, request: FileRequest, size_bytes: int) -> float:
        """Predicted log10 density of one new file (``size_bytes``: its expected size)."""
        if self.models is None:
            return -math.log10(max(int(size_bytes), 1))
        row = features_from_request(request, self.history)
        return self.models.predict_one(row, request.pipeline)

    def predict_many(self, requests: Sequence[FileRequest], sizes: Sequence[int]) -> np.ndarray:
        """Predicted log10 densities of a batch (one call per pipeline's model)."""
        if len(requests) != len(sizes):
            raise ServiceConfigError(f"{len(requests)} requests but {len(sizes)} sizes")
        if not requests:
            return np.empty(0)
        if self.models is None:
            return -np.log10(np.maximum(np.asarray(sizes, dtype=np.float64), 1.0))
        rows = np.stack([features_from_request(r, self.history) for r in requests])
        return self.models.predict(rows, [r.pipeline for r in requests])

    def to_bytes(self) -> bytes:
        """The predictor pickled, as the scheduler ships it to workers."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, payload: bytes) -> Predictor:
        """Inverse of :meth:`to_bytes` (payloads come from the cluster's own scheduler).

        Raises
        ------
        ModelError
            If the payload is not a pickled :class:`Predictor`.
        """
        try:
            value = pickle.loads(payload)
        except Exception as exc:
            raise ModelError(f"the scheduler sent an unreadable model payload: {exc}") from exc
        if not isinstance(value, cls):
            raise ModelError(
                f"the scheduler sent a {type(value).__name__}, not a placement Predictor; "
                "run the same dataplane version on the scheduler and the workers"
            )
        return value

    def describe(self) -> dict[str, Any]:
        """Version, kind, source and sizes, JSON-ready."""
        out: dict[str, Any] = {"version": self.version, "kind": self.kind, "source": self.source}
        if self.models is not None:
            out["pipelines"] = sorted(self.models.per_pipeline)
            booster = self.models.global_model.booster
            out["trees"] = int(booster.num_trees()) if booster is not None else 0
        if self.history is not None:
            out["history_runs"] = self.history.n_runs
            out["history_keys"] = self.history.n_keys
        return out

    def __repr__(self) -> str:
        return f"<Predictor v{self.version} {self.kind}>"
