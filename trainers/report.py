"""Compare runs: validation accuracy against wall time (PNG) and an HTML page.

``dataplane compare RUN_DIR... --out compare.png`` reads each run's
``run.json`` (see :mod:`trainers.run_record`) and draws one line per run:
validation accuracy (y) at the cumulative wall time ``elapsed_s`` (x) of the
end of each epoch. Phase-1 (cached) epochs of ``perfect`` are hollow markers,
the target accuracy a dashed horizontal line. The HTML page (``--html``,
default: the PNG's name with ``.html``) embeds the plot and shows the JSON
summary beside it.

Summary fields per run: ``name``, ``schedule``, ``final_accuracy``,
``best_accuracy``, ``time_to_target_s``, ``elapsed_s``, ``input_share``,
``switch_epoch``, ``switch_reason``, ``epochs``, and ``speedup_vs_<name>``:
the ratio of another run's ``time_to_target_s`` to this run's (above 1 means
this run reached the target sooner), for every other run that reached it.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.errors import RunRecordError
from trainers.run_record import RunRecord

__all__ = ["CompareResult", "compare", "plot_accuracy_vs_time", "summarize"]

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
</style>
</head>
<body>
<h1>{{ title }}</h1>
<table>
<tr><th>run</th><th>schedule</th><th>final accuracy</th><th>time to target (s)</th>
<th>wall time (s)</th><th>input share</th><th>switch epoch</th></tr>
{% for r in summary.runs %}
<tr><td>{{ r.name }}</td><td>{{ r.schedule }}</td><td>{{ "%.4f"|format(r.final_accuracy or 0) }}</td>
<td>{{ "%.1f"|format(r.time_to_target_s) if r.time_to_target_s is not none else "not reached" }}</td>
<td>{{ "%.1f"|format(r.elapsed_s) }}</td><td>{{ "%.3f"|format(r.input_share or 0) }}</td>
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
    """Files written by :func:`compare` and the summary they show."""

    png: Path
    html: Path
    summary: dict[str, Any]


def _labels(records: Sequence[RunRecord], dirs: Sequence[Path]) -> list[str]:
    names = [r.name for r in records]
    return [
        f"{name} ({d.name})" if names.count(name) > 1 else name
        for name, d in zip(names, dirs, strict=True)
    ]


def summarize(records: Sequence[RunRecord], labels: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON summary of several runs (see the module docstring)."""
    labels = list(labels) if labels is not None else [r.name for r in records]
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
            if other is rec:
                continue
            if rec.time_to_target_s and other.time_to_target_s:
                row[f"speedup_vs_{other_label}"] = other.time_to_target_s / rec.time_to_target_s
        runs.append(row)
    return {"runs": runs}


def plot_accuracy_vs_time(
    records: Sequence[RunRecord],
    out: str | os.PathLike[str],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Draw validation accuracy against cumulative wall time, one line per run; return the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(labels) if labels is not None else [r.name for r in records]
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
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
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
        PNG to write.
    html : path, optional
        HTML page to write (default: ``out`` with suffix ``.html``).
    title : str, optional
        Title of the plot and page.
    target_accuracy : float, optional
        Compare at this target instead of each run's own: the crossing times
        are recomputed from the per-epoch records.

    Raises
    ------
    RunRecordError
        No run given, or a directory without a readable ``run.json``.
    """
    if not run_dirs:
        raise RunRecordError("give at least one run directory to compare")
    dirs = [Path(d) for d in run_dirs]
    records = [RunRecord.read(d) for d in dirs]
    if target_accuracy is not None:
        records = [r.retarget(target_accuracy) for r in records]
    labels = _labels(records, [d if d.is_dir() else d.parent for d in dirs])
    png = plot_accuracy_vs_time(records, out, labels=labels, title=title)
    summary = summarize(records, labels)
    html_path = Path(html) if html is not None else png.with_suffix(".html")
    from jinja2 import Environment, select_autoescape

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    page = env.from_string(_HTML).render(
        title=title or "dataplane: time to accuracy",
        summary=summary,
        summary_json=json.dumps(summary, indent=2),
        png_b64=base64.b64encode(png.read_bytes()).decode("ascii"),
    )
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page)
    return CompareResult(png=png, html=html_path, summary=summary)
