"""Compare runs: validation accuracy against wall time (PNG) and an HTML page.

``dataplane compare RUN_DIR... --out compare.png`` reads each run's
``run.json`` (see :mod:`trainers.run_record`) and draws one line per run:
validation accuracy (y) at the cumulative wall time ``elapsed_s`` (x) of the
end of each epoch. Phase-1 (cached) epochs of ``perfect`` are hollow markers,
the target accuracy a dashed horizontal line. The plot's format follows the
suffix of ``--out`` (any format matplotlib writes: ``.png``, ``.svg``,
``.pdf``, ...; :func:`plot_formats`). The HTML page (``--html``, default: the
plot's name with ``.html``) embeds the plot as a PNG and shows the JSON
summary beside it. Neither may replace the other or a run's ``run.json``
(:func:`check_outputs`, before any work).

Summary fields per run: ``name``, ``schedule``, ``final_accuracy``,
``best_accuracy``, ``target_accuracy``, ``time_to_target_s``, ``elapsed_s``,
``input_share``, ``switch_epoch``, ``switch_reason``, ``epochs``, ``status``,
and ``speedup_vs_<name>``: the ratio of another run's ``time_to_target_s``
to this run's (above 1 means this run reached the target sooner), for every
other run that reached it.

Speed-ups compare times to one accuracy, so they are computed only at a
common target: the ``target_accuracy`` given to :func:`compare` (``dataplane
compare --target-accuracy``), or else the runs' own targets when they all
agree. Otherwise no speed-up is given and the summary's ``speedup_note``
says why. The summary's top level also has ``target_accuracy`` (the common
target or null), ``differences`` (for every field that differs between the
runs, its value per run: ``model``, ``epochs_planned``, ``device``,
``world_size`` and the training settings under ``extra``, such as batch
size, learning rate, seed and data options; the knobs of one schedule, such
as ``variants``, are left out) and ``warnings`` (the differences, runs
without a finished epoch, runs that did not end normally), which ``dataplane
compare`` prints and the HTML page shows above the table.
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers._files import json_safe
from trainers.errors import RunRecordError, TrainerConfigError
from trainers.run_record import RUN_FILE, RunRecord

__all__ = [
    "CompareResult",
    "check_outputs",
    "compare",
    "differences",
    "plot_accuracy_vs_time",
    "plot_formats",
    "summarize",
]

_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; }
.row { display: flex; gap: 2em; align-items: flex-start; flex-wrap: wrap; }
img { max-width: 60vw; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 1em; max-width: 35vw; overflow: auto; font-size: 0.85em; }
table { border-collapse: collapse; margin-top: 1em; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.warnings { background: #fff4e5; border: 1px solid #f0b400; padding: 0.5em 2em; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
{% if summary.warnings %}
<ul class="warnings">
{% for w in summary.warnings %}<li>{{ w }}</li>
{% endfor %}
</ul>
{% endif %}
<table>
<tr><th>run</th><th>schedule</th><th>final accuracy</th><th>time to target (s)</th>
<th>wall time (s)</th><th>input share</th><th>switch epoch</th></tr>
{% for r in summary.runs %}
<tr><td>{{ r.name }}</td><td>{{ r.schedule }}</td>
<td>{{ "%.4f"|format(r.final_accuracy) if r.final_accuracy is not none else "-" }}</td>
<td>{{ "%.1f"|format(r.time_to_target_s)
       if r.time_to_target_s is not none else "not reached" }}</td>
<td>{{ "%.1f"|format(r.elapsed_s) if r.epochs else "-" }}</td>
<td>{{ "%.3f"|format(r.input_share) if r.input_share is not none else "-" }}</td>
<td>{{ r.switch_epoch if r.switch_epoch is not none else "-" }}</td></tr>
{% endfor %}
</table>
<div class="row">
<img alt="validation accuracy against wall time" src="data:image/png;base64,{{ png_b64 }}">
<pre>{{ summary_json }}</pre>
</div>
</body>
</html>
"""


@dataclass(frozen=True)
class CompareResult:
    """Files written by :func:`compare` and the summary they show.

    Attributes
    ----------
    png : pathlib.Path
        The plot, in the format of its suffix (PNG by default).
    html : pathlib.Path
        The HTML page.
    summary : dict
        The JSON summary (see the module docstring).
    """

    png: Path
    html: Path
    summary: dict[str, Any]


def plot_formats() -> dict[str, str]:
    """The file formats matplotlib can write, by suffix (``{"png": "Portable Network
    Graphics", ...}``): what :func:`plot_accuracy_vs_time` accepts."""
    from matplotlib.backend_bases import FigureCanvasBase

    return dict(FigureCanvasBase.get_supported_filetypes())


def _plot_format(out: Path) -> str:
    """The format of the plot file ``out`` (its suffix, lower case).

    Raises
    ------
    TrainerConfigError
        ``out`` has no suffix, or one matplotlib cannot write.
    """
    formats = plot_formats()
    fmt = out.suffix[1:].lower()
    if fmt in formats:
        return fmt
    listed = ", ".join(f".{f}" for f in sorted(formats))
    what = f"a .{fmt} file" if fmt else "a file name without a suffix"
    example = out.with_suffix(".png") if out.name else Path("compare.png")
    page = (
        f"; the HTML page is written beside the plot ({example.with_suffix('.html')}) or to "
        "--html (html=)"
        if fmt in ("html", "htm")
        else ""
    )
    raise TrainerConfigError(
        f"--out {out} (out=) is {what}, which matplotlib cannot write the plot as; give a "
        f"name ending in one of {listed} (e.g. --out {example}){page}"
    )


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def check_outputs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    html: str | os.PathLike[str] | None = None,
) -> tuple[Path, Path]:
    """Check the plot and page paths of :func:`compare` before any work.

    Parameters
    ----------
    run_dirs : sequence of path
        The run directories (or ``run.json`` files) to compare.
    out : path
        The plot; its suffix picks the format (see :func:`plot_formats`).
    html : path, optional
        The HTML page (default: ``out`` with suffix ``.html``).

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        The plot and the HTML page.

    Raises
    ------
    TrainerConfigError
        ``out``'s suffix is not a format matplotlib writes, the page would
        replace the plot, or either would replace a run's ``run.json``.
    """
    out = Path(out)
    _plot_format(out)
    html_path = Path(html) if html is not None else out.with_suffix(".html")
    if _same_file(html_path, out):
        raise TrainerConfigError(
            f"--html {html_path} (html=) is the plot's own file (--out {out}); give the page "
            f"another name (e.g. --html {out.with_suffix('.html')}) or leave --html out"
        )
    for d in run_dirs:
        record = Path(d) / RUN_FILE if Path(d).is_dir() else Path(d)
        for option, path in (("out", out), ("html", html_path)):
            if _same_file(path, record):
                raise TrainerConfigError(
                    f"--{option} {path} ({option}=) would replace the run record {record}; "
                    "write it elsewhere"
                )
    return out, html_path


#: Settings under ``extra`` that belong to one schedule (not compared between runs).
_SCHEDULE_KNOBS = frozenset({"variants", "max_cache_bytes", "workers"})
_FINISHED = ("completed", "target_reached")


def _labels(records: Sequence[RunRecord], dirs: Sequence[Path]) -> list[str]:
    names = [r.name for r in records]
    labels = [
        f"{name} ({d.name})" if names.count(name) > 1 else name
        for name, d in zip(names, dirs, strict=True)
    ]
    labels = [  # same run and folder names (x/fresh, y/fresh): add the parent folder
        f"{name} ({d.parent.name}/{d.name})" if labels.count(label) > 1 else label
        for name, label, d in zip(names, labels, dirs, strict=True)
    ]
    out: list[str] = []
    for label in labels:  # still equal (same run and folder names): number them
        out.append(label if label not in out else f"{label} #{labels[: len(out)].count(label) + 1}")
    return out


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(
    records: Sequence[RunRecord], labels: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """The fields whose values differ between ``records``, with each run's value.

    Compared: ``model``, ``epochs_planned``, ``device``, ``world_size`` and the
    settings under ``extra`` (nested dicts flattened to ``key.sub``), except
    the knobs of one schedule (``variants``, ``max_cache_bytes``,
    ``workers``) and ``optimizer.<x>`` entries that repeat a setting ``<x>``
    of every run. A setting missing from a run counts as ``None``.
    """
    labels = list(labels) if labels is not None else [r.name for r in records]
    rows = []
    for rec in records:
        row = {
            "model": rec.model,
            "epochs_planned": rec.epochs_planned,
            "device": rec.device,
            "world_size": rec.world_size,
        }
        extra = _flat(rec.extra)
        row.update({k: v for k, v in extra.items() if k not in _SCHEDULE_KNOBS})
        rows.append(row)
    keys = sorted({k for row in rows for k in row}, key=lambda k: (k not in rows[0], k))
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        if key.startswith("optimizer.") and all(key[10:] in row for row in rows):
            continue
        values = [row.get(key) for row in rows]
        if any(v != values[0] for v in values[1:]):
            out[key] = dict(zip(labels, values, strict=True))
    return out


def _common_target(
    records: Sequence[RunRecord], labels: Sequence[str]
) -> tuple[float | None, str | None]:
    """The target all runs were timed at, or ``None`` and why there is none (naming each run
    by its label)."""
    targets = {r.target_accuracy for r in records}
    if len(targets) == 1:
        (target,) = targets
        if target is not None:
            return target, None
        return None, "no speed-up: the runs have no target accuracy; pass --target-accuracy"
    listed = ", ".join(
        f"{label}: {r.target_accuracy}" for label, r in zip(labels, records, strict=True)
    )
    return None, (
        f"no speed-up: the runs were timed at different target accuracies ({listed}); pass "
        "--target-accuracy (target_accuracy=) to compare them at one"
    )


def summarize(records: Sequence[RunRecord], labels: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON summary of several runs (see the module docstring)."""
    labels = list(labels) if labels is not None else [r.name for r in records]
    target, note = _common_target(records, labels)
    warnings: list[str] = []
    diffs = differences(records, labels) if len(records) > 1 else {}
    both = {k: v for k, v in diffs.items() if None not in v.values()}
    some = [k for k in diffs if k not in both]
    if both:
        parts = [
            f"{key} ({', '.join(f'{label}: {value}' for label, value in per_run.items())})"
            for key, per_run in both.items()
        ]
        warnings.append(
            "the runs differ in more than their schedule, so their times do not compare "
            "like for like: " + "; ".join(parts)
        )
    if some:
        warnings.append(
            "settings recorded (or set) for only some of the runs, check that they match: "
            + ", ".join(some)
        )
    for label, rec in zip(labels, records, strict=True):
        if not rec.epochs:
            warnings.append(f"run {label} (status {rec.status}) has no finished epoch")
        elif rec.status not in _FINISHED:
            warnings.append(
                f"run {label} did not finish (status {rec.status}): its numbers cover "
                f"{len(rec.epochs)} of {rec.epochs_planned} epochs"
            )
    if note is not None and len(records) > 1:
        warnings.append(note)
    runs = []
    for label, rec in zip(labels, records, strict=True):
        row: dict[str, Any] = {
            "name": label,
            "schedule": rec.schedule,
            "final_accuracy": rec.final_accuracy,
            "best_accuracy": rec.best_accuracy,
            "target_accuracy": rec.target_accuracy,
            "time_to_target_s": rec.time_to_target_s,
            "elapsed_s": rec.elapsed_s,
            "input_share": rec.input_share,
            "switch_epoch": rec.switch_epoch,
            "switch_reason": rec.switch_reason,
            "epochs": len(rec.epochs),
            "status": rec.status,
        }
        for other_label, other in zip(labels, records, strict=True):
            if other is rec or target is None:
                continue
            if rec.time_to_target_s and other.time_to_target_s:
                row[f"speedup_vs_{other_label}"] = other.time_to_target_s / rec.time_to_target_s
        runs.append(row)
    return json_safe(
        {
            "runs": runs,
            "target_accuracy": target,
            "speedup_note": note,
            "differences": diffs,
            "warnings": warnings,
        }
    )


def _figure(records: Sequence[RunRecord], labels: Sequence[str], title: str | None) -> Any:
    """The matplotlib figure of validation accuracy against wall time (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    targets = set()
    for label, rec in zip(labels, records, strict=True):
        xs = [e.elapsed_s for e in rec.epochs]
        ys = [e.val_accuracy for e in rec.epochs]
        (line,) = ax.plot(xs, ys, "-", label=label)
        color = line.get_color()
        for e in rec.epochs:
            cached = e.phase == "cached"
            ax.plot(
                e.elapsed_s,
                e.val_accuracy,
                "o",
                color=color,
                markerfacecolor="white" if cached else color,
                markersize=5,
            )
        if rec.time_to_target_s is not None:
            ax.axvline(rec.time_to_target_s, color=color, linestyle=":", linewidth=1)
        if rec.target_accuracy is not None:
            targets.add(rec.target_accuracy)
    for t in sorted(targets):
        ax.axhline(t, color="grey", linestyle="--", linewidth=1, label=f"target {t:.3f}")
    ax.set_xlabel("wall time (s, training + validation)")
    ax.set_ylabel("validation accuracy")
    ax.set_title(title or "Validation accuracy against wall time (hollow: cached phase 1)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def _save(fig: Any, out: Path) -> None:
    """Write ``fig`` to ``out`` in the format of its suffix.

    Raises
    ------
    TrainerConfigError
        The suffix is no format matplotlib writes, or writing failed (for
        example ``.pgf`` without a TeX installation, or an unwritable folder).
    """
    fmt = _plot_format(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format=fmt)
    except (OSError, RuntimeError, ValueError) as exc:
        raise TrainerConfigError(
            f"cannot write the plot to {out} ({exc}); choose another --out (out=), "
            "e.g. a .png file in a writable folder"
        ) from exc


def plot_accuracy_vs_time(
    records: Sequence[RunRecord],
    out: str | os.PathLike[str],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Draw validation accuracy against cumulative wall time, one line per run.

    Parameters
    ----------
    records : sequence of RunRecord
        The runs.
    out : path
        The file to write; its suffix picks the format (``.png``, ``.svg``,
        ``.pdf``, ...: :func:`plot_formats`).
    labels : sequence of str, optional
        Legend entry of each run (default: the run names).
    title : str, optional
        Title of the plot.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TrainerConfigError
        ``out`` has no suffix matplotlib writes, or cannot be written.
    """
    import matplotlib.pyplot as plt

    out = Path(out)
    _plot_format(out)
    labels = list(labels) if labels is not None else [r.name for r in records]
    fig = _figure(records, labels, title)
    try:
        _save(fig, out)
    finally:
        plt.close(fig)
    return out


def compare(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    html: str | os.PathLike[str] | None = None,
    title: str | None = None,
    target_accuracy: float | None = None,
) -> CompareResult:
    """Plot runs side by side and write the HTML page.

    Parameters
    ----------
    run_dirs : sequence of path
        Run directories (or ``run.json`` files).
    out : path
        The plot to write; its suffix picks the format (``.png``, ``.svg``,
        ``.pdf``, ...: :func:`plot_formats`).
    html : path, optional
        HTML page to write (default: ``out`` with suffix ``.html``); it
        embeds the plot as a PNG whatever the format of ``out``.
    title : str, optional
        Title of the plot and page.
    target_accuracy : float, optional
        Compare at this target instead of each run's own: the crossing times
        are recomputed from the per-epoch records.

    Raises
    ------
    RunRecordError
        No run given, or a directory without a readable ``run.json``.
    TrainerConfigError
        ``out`` or ``html`` is refused by :func:`check_outputs`, or the plot
        cannot be written.
    """
    if not run_dirs:
        raise RunRecordError("give at least one run directory to compare")
    out, html_path = check_outputs(run_dirs, out, html)
    dirs = [Path(d) for d in run_dirs]
    records = [RunRecord.read(d) for d in dirs]
    if target_accuracy is not None:
        records = [r.retarget(target_accuracy) for r in records]
    labels = _labels(records, [d if d.is_dir() else d.parent for d in dirs])
    import matplotlib.pyplot as plt

    fig = _figure(records, labels, title)
    try:
        _save(fig, out)
        if _plot_format(out) == "png":
            png_bytes = out.read_bytes()
        else:  # the page shows a PNG whatever the plot's format
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            png_bytes = buffer.getvalue()
    finally:
        plt.close(fig)
    summary = summarize(records, labels)
    from jinja2 import Environment, select_autoescape

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    page = env.from_string(_HTML).render(
        title=title or "dataplane: time to accuracy",
        summary=summary,
        summary_json=json.dumps(summary, indent=2, allow_nan=False),
        png_b64=base64.b64encode(png_bytes).decode("ascii"),
    )
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page)
    return CompareResult(png=out, html=html_path, summary=summary)
