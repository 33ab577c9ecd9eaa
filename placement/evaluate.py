"""Held-out evaluation of learned placement against heuristics and the oracle.

Protocol
--------
1. Unusable rows are dropped and counted (:func:`~placement.features.clean_table`).
2. Features come from :func:`~placement.features.build_features` with a history of
   the whole log, which gives each file only runs finished before it was created.
3. Split (:class:`Split`), so the test holds what the model never trained on:

   ``pipeline``
       Grouped k-fold over pipelines: each fold's model is trained on the other
       pipelines' rows and predicts the held-out pipelines. Every row gets a
       prediction from a model that never saw its pipeline, and the whole log is
       replayed. (History features of a held-out pipeline's *earlier runs* are
       still used, as a live service would; its first run has none.)
   ``time``
       The last ``test_fraction`` of each pipeline's runs (by start time) are held
       out; one model (and one per pipeline with at least ``min_rows`` training rows,
       as ``dataplane placement train --per-workload`` builds them) trained on the
       earlier runs; only the held-out rows are replayed. The per-pipeline models predict as a
       :class:`~placement.model.ModelSet` would (by default the mean of a
       pipeline's model and the global one: ``combine``).

4. Each policy (:mod:`placement.policy`) replays the test rows
   (:func:`placement.replay.replay_budgets`) at SSD budgets that are shares of the
   test rows' peak live bytes (default 1, 2, 5, 10, 20%). The policies fed a density
   estimate take the break-even test under the configured cost model (a file whose
   predicted saving is negative stays on HDD; :mod:`placement.policy`), each file's
   expected lifetime coming from its (pipeline, stage) history
   (:func:`stage_history_lifetime`). Policies are told each file's size as known at
   its creation, :func:`~placement.features.estimated_sizes` (the oracle alone is
   told final sizes; see :mod:`placement.simulator`).
5. Reported: savings against all-HDD per policy and budget (and per file kind:
   where each policy's savings come from), the LightGBM policy's share of the
   oracle's savings and its ratio to the best heuristic, Spearman rank
   correlation of predicted against true density on the test rows, and (with
   ``measure=True``) the model's decision latency, file size and memory.
6. With ``upper_bound`` (the default), the most *any* placement of the test rows could
   save at each budget (:mod:`placement.bound`): the oracle is a greedy packing, so
   this bound, not the oracle, is what says whether a goal is out of every policy's
   reach.

Ratios (a share of the oracle's savings, a multiple of the best heuristic's) are
``a / b`` when ``b`` saved something, ``inf`` when only ``a`` did and ``nan`` when neither
did (:func:`savings_ratio`); a goal is never met on ``nan``. In the JSON
(:meth:`EvaluationResult.write`, :mod:`placement.jsonout`) every non-finite number is
``null``: undefined (nothing against nothing, a rank correlation of too few files) or
unbounded (something against nothing). ``config.overlap`` is ``null`` for the runs as
logged and the string ``"inf"`` for every run at once. The JSON opens with
``evaluation_version`` (:data:`EVALUATION_VERSION`), ``generated_at`` (ISO 8601, UTC) and
``inputs`` (the logs as given); the text file opens with what was evaluated (inputs,
split, test files, overlap), as the command prints it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from placement.cost import (
    DEFAULT_BUDGETS,
    CostModel,
    budgets_to_percents,
    focus_budget_index,
    prices_text,
)
from placement.errors import PlacementConfigError
from placement.features import (
    HistoryStore,
    build_features,
    clean_table,
    estimated_sizes,
    log_density,
)
from placement.jsonout import dumps, json_safe, overlap_json, utc_timestamp
from placement.measure import measure_decisions
from placement.model import (
    MIN_PIPELINE_ROWS,
    Combine,
    DensityModel,
    ModelParams,
    ModelSet,
    check_min_rows,
)
from placement.policy import AdaptiveThresholdPolicy
from placement.replay import replay_budgets
from placement.schema import UNLABELLED
from placement.simulator import (
    Trace,
    check_overlap,
    overlap_runs,
    peak_live_bytes,
    policy_roster,
    savings_by_group,
)
from placement.style import UPPER_BOUND, policy_styles
from placement.text import number_text, text_table

__all__ = [
    "DEFAULT_BUDGETS",
    "EVALUATION_VERSION",
    "HEURISTICS",
    "UPPER_BOUND",
    "EvaluationConfig",
    "EvaluationResult",
    "Split",
    "evaluate",
    "output_paths",
    "savings_ratio",
    "split_masks",
    "stage_history_lifetime",
    "stage_history_prediction",
    "write_outputs",
]

#: Policies counted as heuristics when comparing against the learned policy.
HEURISTICS: tuple[str, ...] = ("first-fit", "small-files-first", "stage-history")
#: Version of the evaluation's JSON (``evaluation_version``); raised when a key changes
#: meaning or goes away, not when one is added.
EVALUATION_VERSION = 1


class EvaluationError(PlacementConfigError):
    """The log cannot be evaluated as asked (too few pipelines or runs, bad settings)."""


class Split(str, enum.Enum):
    """How the test rows are held out (see the module docstring)."""

    PIPELINE = "pipeline"
    TIME = "time"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """Settings of :func:`evaluate`.

    Parameters
    ----------
    split : Split
        ``pipeline`` (grouped k-fold over pipelines) or ``time`` (latest runs held out).
    budgets : sequence of float
        SSD budgets as shares of the test rows' peak live bytes, each in (0, 1] and each
        once: no two may share a label (``5%``: 0.05 and 0.0500000001 do).
    folds : int
        Folds of the pipeline split (at most the number of pipelines).
    test_fraction : float
        Share of each pipeline's runs held out by the time split, in (0, 1).
    per_workload : bool
        Also train per-pipeline models (time split only) and evaluate them, combined
        with the global model as ``combine`` says (:class:`placement.model.ModelSet`).
    combine : Combine or str
        ``mean`` (default, as :class:`~placement.model.ModelSet`) or ``own``.
    min_rows : int
        Fewest training rows a pipeline needs for its own model (default
        :data:`placement.model.MIN_PIPELINE_ROWS`, as ``dataplane placement train``).
    params : ModelParams
        LightGBM settings.
    cost_model : CostModel
        Prices.
    policy_options : dict
        Keyword options of :class:`~placement.policy.AdaptiveThresholdPolicy`, shared by
        every policy built on it (LightGBM, stage history, small files first).
    break_even : bool
        Give the density-fed policies (LightGBM, stage history, the threshold fed the
        true density) the break-even test of :mod:`placement.policy` under
        ``cost_model``, with each file's expected lifetime from
        :func:`stage_history_lifetime` (default ``True``).
    upper_bound : bool
        Also bound from above what any placement of the test rows could save at each
        budget (:func:`placement.bound.savings_upper_bound`, a linear program: a few
        seconds per budget on 40k files; default ``True``).
    overlap : float, optional
        Replay the runs ``overlap`` at a time, as a shared cluster running that many
        pipelines at once would (:func:`placement.simulator.overlap_runs`: each run keeps
        its own timing, runs start ``overlap`` times as often), before the split; the
        history features then count only the runs finished before each file. Default
        ``None``: the runs as logged.
    """

    split: Split = Split.PIPELINE
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    folds: int = 4
    test_fraction: float = 1 / 3
    per_workload: bool = True
    combine: Combine = Combine.MEAN
    min_rows: int = MIN_PIPELINE_ROWS
    params: ModelParams = dataclasses.field(default_factory=ModelParams)
    cost_model: CostModel = dataclasses.field(default_factory=CostModel)
    policy_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    break_even: bool = True
    upper_bound: bool = True
    overlap: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", _member(Split, self.split, "split"))
        object.__setattr__(self, "combine", _member(Combine, self.combine, "combine"))
        budgets = tuple(float(b) for b in self.budgets)
        if not budgets or any(not (0 < b <= 1) for b in budgets):
            raise EvaluationError(
                f"budgets={self.budgets!r} must be shares in (0, 1], e.g. (0.01, 0.05)"
            )
        labels = [_budget_label(b) for b in budgets]
        repeated = sorted({label for label in labels if labels.count(label) > 1}, key=labels.index)
        if repeated:
            once = tuple(budgets[labels.index(label)] for label in dict.fromkeys(labels))
            raise EvaluationError(
                f"budgets={self.budgets!r} give {', '.join(repeated)} more than once (budgets "
                f"are told apart by their labels {labels}); give each budget once, e.g. "
                f"--budgets {budgets_to_percents(once)}"
            )
        object.__setattr__(self, "budgets", budgets)
        if not isinstance(self.folds, int) or self.folds < 2:
            raise EvaluationError(f"folds={self.folds!r} must be an int >= 2")
        try:
            check_min_rows(self.min_rows)
        except ValueError as exc:
            raise EvaluationError(str(exc)) from None
        if not 0 < self.test_fraction < 1:
            raise EvaluationError(f"test_fraction={self.test_fraction!r} must be in (0, 1)")
        if self.overlap is not None:
            try:
                check_overlap(self.overlap)
            except ValueError as exc:
                raise EvaluationError(f"{exc}, or None") from None
        for name in ("break_even", "upper_bound"):
            if not isinstance(getattr(self, name), bool):
                raise EvaluationError(f"{name}={getattr(self, name)!r} must be True or False")
        if {"cost_model", "expected_lifetime"} & set(self.policy_options):
            raise EvaluationError(
                "policy_options may not hold cost_model or expected_lifetime: the "
                "evaluation passes its own cost_model (set break_even=False to leave the "
                "break-even test out)"
            )
        AdaptiveThresholdPolicy(0, **self.policy_options)  # validates the options


def _member(kind: type[enum.Enum], value: Any, name: str) -> Any:
    """``value`` as a member of the enum ``kind``, or an error naming ``name`` and the choices."""
    try:
        return kind(value)
    except ValueError:
        raise EvaluationError(
            f"{name}={value!r} must be one of {[m.value for m in kind]}"
        ) from None


@dataclasses.dataclass
class EvaluationResult:
    """Everything :func:`evaluate` measured (JSON-ready through :meth:`to_dict`)."""

    config: dict[str, Any]
    rows: dict[str, Any]
    peak_live_bytes: int
    savings: dict[str, dict[str, float]]  # policy -> budget label -> savings fraction
    simulations: list[dict[str, Any]]
    spearman: dict[str, float]
    goals: dict[str, Any]
    feature_importances: dict[str, float]
    decisions: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: budget label -> the most any placement could save, as a share of the all-HDD TCO
    #: (:func:`placement.bound.savings_upper_bound`; empty without ``upper_bound``)
    upper_bound: dict[str, float] = dataclasses.field(default_factory=dict)
    #: policy -> budget label -> file kind -> the TCO its files of that kind saved on SSD,
    #: as a share of the test rows' all-HDD TCO (sums to ``savings``;
    #: :func:`placement.simulator.savings_by_group`)
    savings_by_kind: dict[str, dict[str, dict[str, float]]] = dataclasses.field(
        default_factory=dict
    )
    wall_s: float = 0.0
    #: the logs evaluated, as given (``evaluate(inputs=...)``)
    inputs: list[str] = dataclasses.field(default_factory=list)
    #: when :func:`evaluate` finished, ISO 8601 in UTC
    generated_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data; floats as computed (``nan`` and ``inf`` included).

        Opens with ``evaluation_version`` (:data:`EVALUATION_VERSION`), ``generated_at`` and
        ``inputs``, then the other fields in their order.
        """
        fields = dataclasses.asdict(self)
        head: dict[str, Any] = {"evaluation_version": EVALUATION_VERSION}
        head |= {name: fields.pop(name) for name in ("generated_at", "inputs")}
        return head | fields

    def to_json_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` as written to JSON: ``config.overlap`` ``inf`` as the string
        ``"inf"``, then every other non-finite number as ``None`` (see the module docstring)."""
        out = self.to_dict()
        if "overlap" in out["config"]:
            out["config"]["overlap"] = overlap_json(out["config"]["overlap"])
        safe: dict[str, Any] = json_safe(out)
        return safe

    def table(self) -> str:
        """The savings table as text (savings against all-HDD, % of its TCO)."""
        labels = list(next(iter(self.savings.values())).keys()) if self.savings else []
        head = ["policy"] + [f"{b} SSD" for b in labels]
        rows = [
            [name] + [f"{100 * v:6.2f}%" for v in per.values()]
            for name, per in {**self.savings, UPPER_BOUND: self.upper_bound}.items()
            if per
        ]
        return text_table(head, rows)

    def kind_table(self, budget: str | None = None) -> str:
        """Where each policy's savings at ``budget`` come from: points of the all-HDD TCO
        saved by each file kind, and their total.

        ``budget`` is a label of ``savings`` such as ``"5%"``; by default the budget of
        :func:`placement.cost.focus_budget_index` (5% when it was replayed, else the middle
        one), as the report's by-kind view picks it.
        """
        labels = list(next(iter(self.savings.values()), {}))
        if budget is None:
            budget = labels[focus_budget_index(self.config["budgets"])] if labels else ""
        if budget not in labels:
            raise PlacementConfigError(
                f"budget={budget!r} was not replayed; the budgets are {labels}"
            )
        parts = {name: per[budget] for name, per in self.savings_by_kind.items() if budget in per}
        kinds = sorted({kind for per in parts.values() for kind in per})
        rows = [
            [name]
            + [f"{100 * per.get(kind, 0.0):.1f}" for kind in kinds]
            + [f"{100 * self.savings[name][budget]:.1f}"]
            for name, per in parts.items()
            if name != "all-hdd"
        ]
        return text_table([f"policy ({budget} SSD)", *kinds, "total"], rows)

    def text(self, input_summary: str = "") -> str:
        """What the evaluation found, as ``dataplane placement evaluate`` prints it and
        :meth:`write` writes it: the inputs, the split, test files and overlap, the savings
        table, where the savings come from, Spearman correlations, the goals at 5%, and the
        decision measurements.

        ``input_summary`` (lines on what was read and skipped) goes under the inputs.
        """
        config = self.config
        overlap = config.get("overlap")
        lines = [f"logs: {', '.join(self.inputs)}"] if self.inputs else []
        if input_summary:
            lines.append(input_summary)
        lines.append(
            f"TCO savings vs all-HDD ({config['split']} split, {self.rows['test']} test files, "
            + ("runs as logged" if overlap is None else f"runs replayed {overlap:g} at a time")
            + "):"
        )
        if "cost_model" in config:
            lines.append(prices_text(CostModel(**config["cost_model"])))
        lines.append(self.table())
        if "lightgbm-per-workload" in self.savings:
            own = self.rows["per_pipeline_models"]
            lines.append(
                f"lightgbm-per-workload: {len(own)} of {len(self.rows['test_pipelines'])} test "
                f"pipelines have their own model (>= {config['min_rows']} training rows), "
                f"combined by {config['combine']}"
            )
        if self.savings_by_kind:
            lines.append("where the savings come from (points of the all-HDD TCO):")
            lines.append(self.kind_table())
        lines.append(
            "Spearman (predicted vs true density): "
            + ", ".join(f"{k}={v:.3f}" for k, v in self.spearman.items() if not math.isnan(v))
        )
        five = self.goals.get("5%", {})
        if five:
            capture = number_text(five["oracle_capture"], ".1f", scale=100, suffix="%")
            ratio = number_text(five["ratio_to_best_heuristic"], ".2f", suffix="x")
            lines.append(
                f"at 5%: lightgbm captures {capture} of the oracle's savings; "
                f"{ratio} the best heuristic ({five['best_heuristic']})"
            )
            if "upper_bound" in five:
                bound_ratio = number_text(
                    five["upper_bound_ratio_to_best_heuristic"], ".2f", suffix="x"
                )
                oracle_ratio = number_text(
                    five["oracle_ratio_to_best_heuristic"], ".2f", suffix="x"
                )
                lines.append(
                    f"at 5%: no placement saves more than {100 * five['upper_bound']:.1f}%, "
                    f"{bound_ratio} the best heuristic (the oracle {oracle_ratio})"
                )
        if self.decisions:
            d = self.decisions
            rss = (
                f"predictor RSS +{d['predictor_rss_delta_bytes'] / 2**20:.1f} MiB"
                if d["predictor_rss_delta_bytes"] is not None
                else f"predictor RSS not measured ({d['predictor_rss_error']})"
            )
            lines.append(
                f"decision: single p50 {d['single_us_p50']:.1f} us "
                f"(p99 {d['single_us_p99']:.1f}), batched {d['batched_per_s']:,.0f}/s; "
                f"model {d['model_file_bytes']:,} bytes; {rss}"
            )
        return "\n".join(lines)

    def figure(self) -> Any:
        """Savings against SSD budget, one line per policy (each drawn in its style of
        :mod:`placement.style`), as a matplotlib ``Figure``; the caller closes it."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        budgets = [float(b) for b in self.config["budgets"]]
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        lines = {
            name: per
            for name, per in {**self.savings, UPPER_BOUND: self.upper_bound}.items()
            if name != "all-hdd" and per
        }
        styles = policy_styles(lines)
        for name, per in lines.items():
            ax.plot(
                [100 * b for b in budgets],
                [100 * v for v in per.values()],
                label=name,
                **styles[name].kwargs(),
            )
        if len(set(budgets)) == 1:  # one point: a range around it (matplotlib warns otherwise)
            ax.set_xlim(50 * budgets[0], 200 * budgets[0])
        ax.set_xscale("log")
        ax.set_xticks([100 * b for b in budgets], [f"{100 * b:g}%" for b in budgets])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # only the budgets
        ax.set_xlabel("SSD budget (share of peak live bytes)")
        ax.set_ylabel("TCO savings vs all-HDD (%)")
        ax.set_title(
            f"Placement savings, {self.config['split']} split ({self.rows['test']} test files)"
        )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """:meth:`figure` written to ``path`` as a PNG."""
        import matplotlib.pyplot as plt

        fig = self.figure()
        try:
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(out)
        finally:
            plt.close(fig)
        return out

    def write(
        self,
        directory: str | os.PathLike[str],
        stem: str = "placement-eval",
        *,
        input_summary: str = "",
    ) -> dict[str, Path]:
        """Write ``<stem>.json``, ``<stem>.txt`` and ``<stem>.png`` in ``directory``,
        replacing any there (:func:`write_outputs`).

        The JSON is :meth:`to_json_dict`: strict JSON, ``null`` for a number that is
        undefined or unbounded. The text is :meth:`text` of ``input_summary``. Returns the
        paths by kind (``json``, ``table``, ``png``).
        """
        return write_outputs(
            directory,
            stem,
            data=self.to_json_dict(),
            text=self.text(input_summary),
            plot=self.plot,
        )


def output_paths(
    directory: str | os.PathLike[str], stem: str = "placement-eval", *, png: bool = True
) -> dict[str, Path]:
    """The files :func:`write_outputs` writes in ``directory``, by kind: ``json``, ``table``
    (``.txt``) and, with ``png``, ``png``."""
    d = Path(directory)
    paths = {"json": d / f"{stem}.json", "table": d / f"{stem}.txt"}
    if png:
        paths["png"] = d / f"{stem}.png"
    return paths


def write_outputs(
    directory: str | os.PathLike[str],
    stem: str,
    *,
    data: Mapping[str, Any],
    text: str,
    plot: Callable[[Path], object] | None = None,
) -> dict[str, Path]:
    """Write a command's outputs in ``directory`` (created if needed), replacing any there:
    ``<stem>.json`` (``data`` as strict JSON, :func:`placement.jsonout.dumps`),
    ``<stem>.txt`` (``text``) and, given ``plot`` (called with the path), ``<stem>.png``.

    Returns the paths by kind (:func:`output_paths`).
    """
    paths = output_paths(directory, stem, png=plot is not None)
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    paths["json"].write_text(dumps(data, indent=2, default=str))
    paths["table"].write_text(text + "\n")
    if plot is not None:
        plot(paths["png"])
    return paths


def savings_ratio(a: float, b: float) -> float:
    """``a / b`` for savings ``a`` against ``b``: ``inf`` when only ``a`` saved anything
    (``b <= 0 < a``), ``nan`` when neither did (or either is ``nan``)."""
    if b > 0:
        return a / b
    if a > 0:
        return math.inf
    return math.nan


def _budget_label(b: float) -> str:
    return f"{100 * b:g}%"


def split_masks(df: pd.DataFrame, config: EvaluationConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) boolean row masks of each fold of the configured split."""
    pipes = df["pipeline"].astype(str).to_numpy()
    names = sorted(set(pipes))
    if config.split is Split.PIPELINE:
        if len(names) < 2:
            fix = "use --split time" if _time_split_holds_out(df) else _labels_hint(names)
            raise EvaluationError(
                f"the pipeline split needs at least 2 pipelines; the log has {names}; {fix}"
            )
        k = min(config.folds, len(names))
        # deterministic round-robin over pipelines ordered by name
        folds = []
        for f in range(k):
            held = set(names[f::k])
            test = np.isin(pipes, list(held))
            folds.append((~test, test))
        return folds
    starts = df.groupby("run_id")["created_at"].transform("min").to_numpy()
    test = np.zeros(len(df), dtype=bool)
    run_ids = df["run_id"].astype(str).to_numpy()
    for name in names:
        mask = pipes == name
        runs = pd.Series(starts[mask], index=run_ids[mask]).groupby(level=0).min().sort_values()
        n_test = math.floor(len(runs) * config.test_fraction)
        if len(runs) >= 2:
            n_test = max(1, n_test)
        held = set(runs.index[len(runs) - n_test :]) if n_test else set()
        test |= mask & np.isin(run_ids, list(held))
    if not test.any() or test.all():
        fix = "use --split pipeline" if len(names) >= 2 else _labels_hint(names)
        raise EvaluationError(
            "the time split found no runs to hold out (each pipeline needs >= 2 runs); " + fix
        )
    return [(~test, test)]


def _time_split_holds_out(df: pd.DataFrame) -> bool:
    """Whether the time split would hold out some runs and keep others: a pipeline of the
    log has at least 2 runs and the log more than one run."""
    runs = df.groupby(df["pipeline"].astype(str))["run_id"].nunique()
    return bool((runs >= 2).any()) and df["run_id"].nunique() >= 2


def _labels_hint(names: Sequence[str]) -> str:
    """What to do when neither split can work: label runs, or log more of them."""
    if list(names) == [UNLABELLED]:
        return (
            "the log's files carry no pipeline or run labels (a cluster that sets no run "
            "context): label each run from the client with client.run(placement.storage."
            "set_run_context, RunContext(pipeline=..., run_id=...)) before it starts"
        )
    return "log runs of another pipeline, or several runs of this one"


def stage_history_prediction(features: pd.DataFrame) -> np.ndarray:
    """The stage-history heuristic's density estimate: the mean log density of the file's
    (pipeline, stage) in earlier runs, else of its stage name, (kind, operator), pipeline."""
    est = features["h_ps_ld"].copy()
    for col in ("h_s_ld", "h_ko_ld", "h_p_ld"):
        est = est.fillna(features[col])
    return est.to_numpy(np.float64)


def stage_history_lifetime(features: pd.DataFrame) -> np.ndarray:
    """Expected lifetime of each file, in seconds: the geometric mean lifetime of its
    (pipeline, stage) in runs finished before it was created (``10 ** h_ps_llife``, a
    history feature, so known at creation); ``NaN`` without such runs."""
    return np.power(10.0, features["h_ps_llife"].to_numpy(np.float64))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return math.nan
    a, b = a[ok], b[ok]
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan  # undefined for a constant input (and scipy would warn about it)
    return float(spearmanr(a, b).statistic)


def evaluate(
    table: pa.Table | pd.DataFrame,
    config: EvaluationConfig | None = None,
    *,
    progress: bool = False,
    measure: bool = False,
    log: Callable[[str], None] | None = None,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> EvaluationResult:
    """Train on part of ``table``, replay the rest through every policy; see the module docstring.

    Parameters
    ----------
    table : pyarrow.Table or pandas.DataFrame
        Log rows (bad rows are dropped and counted).
    config : EvaluationConfig, optional
        Settings.
    progress : bool
        Show progress bars.
    measure : bool
        Also measure decision latency, model file size and predictor memory.
    log : callable, optional
        Called with one-line progress messages.
    inputs : sequence of str, optional
        Where ``table`` was read from (log files or directories, as given): recorded in
        the result (:attr:`EvaluationResult.inputs`), never read.
    """
    start = time.perf_counter()
    config = config or EvaluationConfig()
    say = log or (lambda _msg: None)
    df, issues = clean_table(table)
    if len(df) == 0:
        raise EvaluationError("no usable log rows to evaluate")
    if config.overlap is not None:
        df = overlap_runs(df, config.overlap)
    history = HistoryStore.from_table(df)
    features = build_features(df, history)
    target = log_density(df)
    folds = split_masks(df, config)
    pipes = df["pipeline"].astype(str).to_numpy()

    pred = np.full(len(df), np.nan)
    pred_pw = np.full(len(df), np.nan)
    test = np.zeros(len(df), dtype=bool)
    importances: dict[str, float] = {}
    model_for_measure: DensityModel | None = None
    own_models: set[str] = set()  # pipelines the per-workload policy gave their own model
    for k, (train, held) in enumerate(folds):
        say(
            f"fold {k + 1}/{len(folds)}: training on {int(train.sum())} rows, "
            f"testing {int(held.sum())}"
        )
        model = DensityModel(config.params).fit_features(features.loc[train], target[train])
        pred[held] = model.predict(features.loc[held])
        test |= held
        for name, v in model.feature_importances("gain").items():
            importances[name] = importances.get(name, 0.0) + v / len(folds)
        model_for_measure = model_for_measure or model
        if config.split is Split.TIME and config.per_workload:
            models = ModelSet.from_global(
                model,
                features.loc[train],
                target[train],
                pipes[train],
                min_rows=config.min_rows,
                only=pipes[held],
                params=config.params,
                combine=config.combine,
            )
            pred_pw[held] = models.predict(features.loc[held], pipes[held])
            own_models.update(models.per_pipeline)

    tdf = df.loc[test].reset_index(drop=True)
    # what each test file is expected to reach, known at its creation: the SSD policies reserve it
    trace = Trace.from_clean(tdf, known_size=estimated_sizes(df, history)[test])
    peak = peak_live_bytes(trace)
    true_ld = target[test]
    preds: dict[str, np.ndarray] = {
        "lightgbm": pred[test],
        "stage-history": stage_history_prediction(features.loc[test]),
    }
    if config.split is Split.TIME and config.per_workload:
        preds["lightgbm-per-workload"] = pred_pw[test]
    spearman = {name: _spearman(p, true_ld) for name, p in preds.items()}
    spearman["small-files-first"] = _spearman(
        -features.loc[test, "log_expected_size"].to_numpy(), true_ld
    )

    extra = {k: v for k, v in preds.items() if k == "lightgbm-per-workload"}
    extra["threshold+true-density"] = true_ld
    policies = policy_roster(
        trace,
        config.cost_model,
        stage_history=preds["stage-history"],
        lightgbm=preds["lightgbm"],
        extra=extra,
        options=config.policy_options,
        expected_lifetime=stage_history_lifetime(features.loc[test]),
        break_even=config.break_even,
    )

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(policies) * len(config.budgets),
            desc="evaluate",
            unit="replay",
            disable=None,  # shown on a terminal only
        )
    replays = replay_budgets(
        trace,
        policies,
        config.budgets,
        config.cost_model,
        upper_bound=config.upper_bound,
        keep_tiers=True,
        on_replay=bar.update if bar is not None else None,
    )
    if bar is not None:
        bar.close()
    sims: list[dict[str, Any]] = []
    savings: dict[str, dict[str, float]] = {name: {} for name, _, _ in policies}
    by_kind: dict[str, dict[str, dict[str, float]]] = {name: {} for name, _, _ in policies}
    kinds = tdf["file_kind"].astype(str).to_numpy()
    bounds: dict[str, float] = {}
    for replay in replays:
        label = _budget_label(replay.budget)
        if replay.upper_bound is not None:
            bounds[label] = replay.upper_bound
        for name, sim in replay.results.items():
            sims.append({**sim.to_dict(), "budget": replay.budget})
            savings[name][label] = sim.savings_fraction
            by_kind[name][label] = savings_by_group(trace, sim.tiers, kinds, config.cost_model)

    goals = _goals(savings, config.budgets, bounds)
    result = EvaluationResult(
        config={
            "split": config.split.value,
            "budgets": list(config.budgets),
            "folds": len(folds),
            "test_fraction": config.test_fraction if config.split is Split.TIME else None,
            "combine": config.combine.value,
            "min_rows": config.min_rows,
            "params": dataclasses.asdict(config.params),
            "cost_model": config.cost_model.to_dict(),
            "policy_options": dict(config.policy_options),
            "break_even": config.break_even,
            "upper_bound": config.upper_bound,
            "overlap": config.overlap,
        },
        rows={
            "total": issues.total_rows,
            "dropped": issues.to_dict(),
            "usable": len(df),
            "test": int(test.sum()),
            "train_per_fold": [int(tr.sum()) for tr, _ in folds],
            "pipelines": sorted(set(pipes)),
            "test_pipelines": sorted(set(pipes[test])),
            "per_pipeline_models": sorted(own_models),
            "runs": int(df["run_id"].nunique()),
            "test_runs": int(tdf["run_id"].nunique()),
        },
        peak_live_bytes=peak,
        savings=savings,
        simulations=sims,
        spearman=spearman,
        goals=goals,
        feature_importances=dict(sorted(importances.items(), key=lambda kv: -kv[1])),
        upper_bound=bounds,
        savings_by_kind=by_kind,
        inputs=[os.fspath(p) for p in inputs],
    )
    if measure and model_for_measure is not None:
        say("measuring decision latency, model size and memory")
        result.decisions = measure_decisions(model_for_measure, df, history)
    result.wall_s = time.perf_counter() - start
    result.generated_at = utc_timestamp()
    return result


def _goals(
    savings: dict[str, dict[str, float]],
    budgets: Sequence[float],
    bounds: dict[str, float] | None = None,
) -> dict[str, Any]:
    """LightGBM's share of the oracle's savings and its ratio to the best heuristic, per
    budget; with ``bounds``, also the most any placement could save against that heuristic."""
    out: dict[str, Any] = {}
    for b in budgets:
        label = _budget_label(b)
        lgbm = savings["lightgbm"][label]
        oracle = savings["oracle"][label]
        best_name = max(HEURISTICS, key=lambda h: savings[h][label])
        best = savings[best_name][label]
        out[label] = {
            "lightgbm": lgbm,
            "oracle": oracle,
            "oracle_capture": savings_ratio(lgbm, oracle),
            "best_heuristic": best_name,
            "best_heuristic_savings": best,
            "ratio_to_best_heuristic": savings_ratio(lgbm, best),
            "oracle_ratio_to_best_heuristic": savings_ratio(oracle, best),
        }
        if bounds and label in bounds:
            out[label]["upper_bound"] = bounds[label]
            out[label]["upper_bound_ratio_to_best_heuristic"] = savings_ratio(bounds[label], best)
        if "lightgbm-per-workload" in savings:
            pw = savings["lightgbm-per-workload"][label]
            out[label]["per_workload"] = pw
            out[label]["per_workload_oracle_capture"] = savings_ratio(pw, oracle)
    five = out.get("5%")
    if five is not None:
        # a nan ratio (nothing saved against nothing) meets no goal: nan >= x is False
        out["goal_oracle_capture_85pct_at_5pct"] = bool(five["oracle_capture"] >= 0.85)
        out["goal_1_5x_best_heuristic_at_5pct"] = bool(five["ratio_to_best_heuristic"] >= 1.5)
    return out
