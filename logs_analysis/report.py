"""The report: one self-contained HTML file and ``<name>.json`` beside it.

:func:`build_report` runs the stages below (with a tqdm bar over them) and returns a
:class:`Report`; :meth:`Report.write` renders the HTML (jinja2 template
``templates/report.html.j2``, figures embedded as base64 PNG, no script, no external
URL, viewable offline) and writes the JSON (the same numbers, machine-readable; NaN and
infinities become ``null``).

Stages: discover inputs -> read, filter and aggregate (Dask, one pass) -> distributions -> skew
-> predictability (cross-validated LightGBM on a sample) -> savings (simulator replays)
-> figures. Predictability and savings need :mod:`placement`'s model and simulator;
without them (or with too few rows) their sections say why instead.

Filters (:class:`~logs_analysis.filters.RowFilter`: ``pipelines``, ``since``, ``until``)
select the usable rows every analysis sees; the JSON's ``filters`` and the HTML's summary
say which were applied and how many rows each removed. With ``csv=True``,
:meth:`Report.write` also writes the per-group table (:data:`CSV_COLUMNS`) as
``<name>.groups.csv`` beside the HTML.

The JSON
--------
One object; ``report_version`` (:data:`REPORT_VERSION`) is raised when a key changes
meaning or goes away, not when one is added. Shares and savings are **fractions** (0.05
is 5%; the HTML shows percents), SSD budgets are fractions of peak live bytes, counts
are integers, and ``null`` stands for a value that is undefined (NaN) or absent.

======================  ===============================================================
key                     holds
======================  ===============================================================
``report_version``      int
``title``,              str; the time is ISO 8601, UTC
``generated_at``
``inputs``              ``paths`` given, ``format``, and ``sources``: each file's
                        ``path``, ``format``, ``container`` and ``rows`` (usable rows
                        the filters kept)
``rows``                ``read``, ``usable`` (before the filters),
                        ``removed_by_filters``, ``selected`` (analysed: ``usable`` less
                        those removed), ``skipped_lines_records_files``, ``chunks``
``filters``             ``applied`` (bool), ``pipelines`` (list), ``since`` and
                        ``until`` (ISO 8601 UTC or ``null``), ``removed`` (usable rows
                        removed by each filter, in the order they apply: ``pipeline``,
                        ``created_at``), ``unknown_pipelines`` (names no row has)
``issues``              ``total`` = ``malformed`` (malformed or duplicate lines, records,
                        rows; damaged logs) + ``skipped_inputs`` (files and folders not
                        read: not logs, unreadable, unsupported, given twice; one
                        each); ``counts`` by reason;
                        the first ``examples`` of each (``source``, ``location``,
                        ``reason``, ``detail``)
``totals``              of the rows selected: ``files``, ``runs``, ``pipelines``,
                        ``bytes``, ``read_bytes``, ``write_bytes`` (bytes), ``read_ops``,
                        ``write_ops``, ``files_without_io`` (counts), ``byte_seconds``,
                        ``span_s`` (seconds), ``mean_density`` (operations per byte per
                        second)
``histogram_range``     ``log10_low``/``log10_high`` of the bins, and per variable the
                        values ``outside`` them
``units``               the unit of each variable, in words
``density``,            per grouping (``overall``, ``pipeline``, ...) a list, largest
``lifetime``, ``size``  first (up to 200): ``key``, ``rows``, ``bytes``, ``ops``,
                        ``quantiles`` (``p1`` ... ``p99``, in the variable's unit),
                        ``decades`` (log10 p99/p1 over values above zero),
                        ``share_rows``/``share_bytes``/``share_ops`` (fractions)
``skew``                ``overall`` and ``by_pipeline``: ``by_bytes`` and
                        ``by_byte_seconds``, each the fraction of all operations on the
                        densest ``"1%"`` and ``"5%"`` of bytes (or byte-seconds)
``sample``              ``rows``, ``method``, ``runs`` of the row sample
``predictability``      :meth:`PredictabilityResult.to_dict` (Spearman correlations,
                        feature importances as fractions of the gain), or
                        ``{"unavailable": reason}``
``savings``             :meth:`SavingsResult.to_dict` (``budgets``, ``savings`` and
                        ``ssd_io_share`` per policy and budget, ``upper_bound``,
                        ``savings_by_kind``, ``cost_model``, ``all_hdd_tco_usd`` in US
                        dollars), ``oracle_capture_lightgbm``, ``best_heuristic`` (per
                        budget: ``policy``, ``savings``, ``lightgbm_ratio``, a multiple)
                        and ``focus_budget_index`` (the headline budget); or
                        ``{"unavailable": reason}``
``config``              the settings (``budgets`` as fractions)
``outputs``             with ``csv``: ``csv``, the CSV files written beside the HTML
                        (names)
``timings_s``           seconds per stage and ``total``
``environment``         ``python`` version and ``cores``
======================  ===============================================================
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import io
import json
import logging
import math
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from logs_analysis.aggregate import Aggregate, AggregateConfig, aggregate
from logs_analysis.analyses import Unavailable
from logs_analysis.analyses.distributions import (
    QUANTILES,
    UNITS,
    distribution_table,
    histogram_series,
)
from logs_analysis.analyses.predictability import (
    PredictabilityConfig,
    PredictabilityResult,
    predictability,
)
from logs_analysis.analyses.savings import DEFAULT_BUDGETS, SavingsResult, savings_curve
from logs_analysis.analyses.skew import skew, skew_by
from logs_analysis.errors import AnalysisConfigError, AnalysisError, OutputError
from logs_analysis.filters import PIPELINE, TIME_RANGE, RowFilter, unknown_pipelines_message
from logs_analysis.formats import LogFormat, discover, resolved_path
from logs_analysis.histogram import LOG_HI, LOG_LO
from logs_analysis.issues import SKIPPED_INPUT_REASONS
from logs_analysis.readers import plan
from placement.cost import FIELD_MEANINGS, CostModel, focus_budget_index

__all__ = [
    "COST_MODEL_FIELDS",
    "CSV_COLUMNS",
    "REPORT_VERSION",
    "Report",
    "ReportConfig",
    "build_report",
    "check_output_paths",
    "check_writable",
    "csv_path_for",
    "json_path_for",
]

logger = logging.getLogger(__name__)

# 2: a Parquet log without the columns, or of a newer schema, counts as 1 file
# 3: a Spark event log without listener events is 1 input not read (was malformed); a damaged
#    Parquet log is 1 damaged file however many chunks it is read in, its readable row groups
#    kept (was the rows of each damaged chunk, or the file when read in one chunk)
REPORT_VERSION = 3
STAGES = (
    "discover",
    "read + aggregate",
    "distributions",
    "skew",
    "predictability",
    "savings",
    "figures",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """Settings of a report.

    Parameters
    ----------
    format : LogFormat or str
        ``auto`` (detect each file) or the format to read every input as.
    scheduler : str
        ``threads`` (default), ``processes``, ``sync`` or a Dask scheduler address.
    budgets : tuple of float
        SSD budgets for the savings curve, shares of peak live bytes in (0, 1].
    sample_rows : int
        Rows sampled (whole runs) for predictability.
    savings_rows : int
        At most this many rows are replayed per policy and budget: whole runs while they
        fit, or this many rows drawn at random (cutting runs) when whole runs fill less than
        half of it or there are fewer than 5 runs (see :mod:`logs_analysis.analyses.savings`).
    folds : int
        Cross-validation folds.
    n_estimators : int
        LightGBM trees per fold.
    top : int
        Groups shown per table and figure (largest first); ``report.json`` holds up to 200.
    seed : int
        Seed of the samples and models.
    progress : bool
        Show a tqdm progress bar over the stages, when stderr is a terminal.
    title : str or None
        Report title (default from the inputs).
    cost_model : placement.cost.CostModel
        Prices of the savings curve (default: public list prices, :mod:`placement.cost`).
    pipelines : tuple of str
        Analyse only the rows of these pipelines (none: all).
    since, until : str or datetime or None
        Analyse only the files created at or after ``since`` and before ``until`` (ISO
        8601, UTC unless an offset is given); stored as aware UTC datetimes.
    csv : bool
        :meth:`Report.write` also writes the per-group table as CSV beside the HTML
        (checked with the other outputs before any input is read).

    Raises
    ------
    AnalysisConfigError
        If a setting is out of range; for the filters, a time that does not parse or a
        ``since`` not before ``until`` (:class:`~logs_analysis.filters.RowFilter`).
    """

    format: LogFormat | str = LogFormat.AUTO
    scheduler: str = "threads"
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    sample_rows: int = 50_000
    savings_rows: int = 20_000
    folds: int = 4
    n_estimators: int = 200
    top: int = 25
    seed: int = 0
    progress: bool = True
    title: str | None = None
    cost_model: CostModel = dataclasses.field(default_factory=CostModel)
    pipelines: tuple[str, ...] = ()
    since: _dt.datetime | str | None = None
    until: _dt.datetime | str | None = None
    csv: bool = False

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "format", LogFormat(self.format))
        except ValueError:
            raise AnalysisConfigError(
                f"format={self.format!r} must be one of {[f.value for f in LogFormat]}"
            ) from None
        budgets = tuple(float(b) for b in self.budgets)
        if not budgets or any(not (0 < b <= 1) or not math.isfinite(b) for b in budgets):
            raise AnalysisConfigError(
                f"budgets={self.budgets!r} must be shares in (0, 1], e.g. (0.01, 0.05)"
            )
        object.__setattr__(self, "budgets", tuple(sorted(set(budgets))))
        for name in ("savings_rows", "top"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AnalysisConfigError(f"{name}={value!r} must be a positive int")
        if not isinstance(self.cost_model, CostModel):
            raise AnalysisConfigError(
                f"cost_model={self.cost_model!r} must be a placement.cost.CostModel"
            )
        row_filter = RowFilter(pipelines=self.pipelines, since=self.since, until=self.until)
        for name in ("pipelines", "since", "until"):
            object.__setattr__(self, name, getattr(row_filter, name))
        AggregateConfig(sample_rows=self.sample_rows, scheduler=self.scheduler)
        PredictabilityConfig(folds=self.folds, n_estimators=self.n_estimators)

    @property
    def row_filter(self) -> RowFilter:
        """The filters of the report (:class:`~logs_analysis.filters.RowFilter`)."""
        return RowFilter(pipelines=self.pipelines, since=self.since, until=self.until)


def json_path_for(html_path: str | os.PathLike[str]) -> Path:
    """Where the JSON of an HTML report goes: same folder and stem (``report.html`` ->
    ``report.json``)."""
    return Path(html_path).with_suffix(".json")


def csv_path_for(html_path: str | os.PathLike[str]) -> Path:
    """Where the per-group CSV of an HTML report goes: same folder and stem
    (``report.html`` -> ``report.groups.csv``)."""
    html = Path(html_path)
    return html.with_name(f"{html.stem}.groups.csv")


def check_output_paths(
    html_path: str | os.PathLike[str],
    inputs: Sequence[str | os.PathLike[str]] = (),
    sources: Sequence[str | os.PathLike[str]] = (),
    *,
    csv: bool = False,
) -> tuple[Path, Path]:
    """The HTML and JSON paths of a report, checked against its inputs.

    Parameters
    ----------
    html_path : path
        The HTML report (``--out``); the JSON goes beside it (:func:`json_path_for`).
    inputs : list of path
        The paths given (files and directories).
    sources : list of path
        The sources found under them (:func:`logs_analysis.formats.discover`).
    csv : bool
        The per-group CSV (:func:`csv_path_for`) is written too, so it is checked too.

    Returns
    -------
    (Path, Path)
        ``html_path`` and its JSON path, as given.

    Raises
    ------
    OutputError
        If the HTML and the JSON would be one file (``--out`` ends in ``.json``), or either
        would replace an input file or land inside an input directory that is read, or the
        folder they go to cannot be written (:func:`check_writable`).
    """
    html = Path(html_path)
    json_file = json_path_for(html)
    if resolved_path(html) == resolved_path(json_file):
        raise OutputError(
            f"--out {html} ends in .json, so the HTML report and its JSON would both be "
            f"{json_file}; choose another --out, e.g. {html.with_suffix('.html')}"
        )
    files: set[Path] = set()
    dirs: set[Path] = set()
    for p in [*inputs, *sources]:
        r = resolved_path(p)
        if r.is_dir():
            dirs.add(r)
        else:
            files.add(r)
    outputs = [(html, "the HTML report"), (json_file, f"the JSON beside --out {html}")]
    if csv:
        outputs.append((csv_path_for(html), f"the CSV beside --out {html}"))
    for out, what in outputs:
        r = resolved_path(out)
        if r in files:
            raise OutputError(f"{what} would overwrite the input log {out}; choose another --out")
        for d in sorted(dirs):
            if r == d or d in r.parents:
                raise OutputError(
                    f"{what} ({out}) would be written inside the input directory {d}, which "
                    "is read as logs; choose another --out outside it"
                )
    check_writable(html)
    return html, json_file


def check_writable(html_path: str | os.PathLike[str]) -> None:
    """Check, before any analysis, that the report can be written where asked.

    The folder of ``html_path`` must be a directory this process can create files in, or,
    if it does not exist yet, the nearest folder above it that does must be (the missing
    ones are created on writing). Checked by creating an unnamed temporary file there,
    which leaves nothing behind.

    Raises
    ------
    OutputError
        Naming the folder and the reason (not a directory, permission denied, read-only
        file system...).
    """
    import tempfile

    parent = Path(html_path).parent
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(
            f"cannot write the report to {parent}: {existing} is not a directory; choose "
            "another --out"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        where = "" if existing == parent else f" (creating files in {existing})"
        raise OutputError(
            f"cannot write the report to {parent}: {exc.strerror or exc}{where}; "
            "choose another --out or make the folder writable"
        ) from exc


def _clean(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_clean(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


@dataclasses.dataclass
class Report:
    """A built report: ``data`` (what ``report.json`` holds) and the figures (data URIs)."""

    data: dict[str, Any]
    figures: dict[str, str]

    def to_json(self) -> str:
        return json.dumps(_clean(self.data), indent=2, allow_nan=False)

    def render_html(self) -> str:
        """The self-contained HTML text."""
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.PackageLoader("logs_analysis", "templates"),
            autoescape=jinja2.select_autoescape(["html", "j2"]),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(
            bytes=_fmt_bytes,
            sci=_fmt_sci,
            pct=_fmt_pct,
            num=_fmt_num,
            secs=_fmt_secs,
            val=_fmt_value,
            skipped_input=lambda reason: reason in SKIPPED_INPUT_REASONS,
        )
        data = _clean(self.data)
        return env.get_template("report.html.j2").render(
            r=data,
            filter_text=_filter_text(data.get("filters", {})),
            filter_names=FILTER_NAMES,
            fig=self.figures,
            cost_fields=COST_MODEL_FIELDS,
            cost_defaults=CostModel().to_dict(),
        )

    def to_csv(self) -> str:
        """The per-group table as CSV text: one line per variable (``density``,
        ``lifetime``, ``size``), grouping and group, as in the JSON (largest first, up to
        200 groups a grouping), in the columns :data:`CSV_COLUMNS`. Numbers are in the
        unit the ``unit`` column names (counts, bytes; shares are fractions); an undefined
        value is empty."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        data = _clean(self.data)
        for variable in ("density", "lifetime", "size"):
            for grouping, groups in data.get(variable, {}).items():
                for d in groups:
                    quantiles = d.get("quantiles") or {}
                    writer.writerow(
                        [
                            variable,
                            UNITS[variable],
                            grouping,
                            " / ".join(d["key"]) if d["key"] else "all",
                            d["rows"],
                            d["bytes"],
                            d.get("ops"),
                            d["share_rows"],
                            d["share_bytes"],
                            d.get("share_ops"),
                            d.get("decades"),
                            *(quantiles.get(q) for q in _QUANTILE_KEYS),
                        ]
                    )
        return out.getvalue()

    def write(self, html_path: str | os.PathLike[str], *, csv: bool = False) -> tuple[Path, Path]:
        """Write the HTML to ``html_path`` and the JSON beside it; returns both paths.

        With ``csv``, the per-group table (:meth:`to_csv`) goes beside them too
        (:func:`csv_path_for`), and the JSON's ``outputs`` names it.

        Raises
        ------
        OutputError
            If the HTML and the JSON would be one file, or either would overwrite an input
            of the report or land inside an input directory (:func:`check_output_paths`);
            nothing is written then.
        AnalysisError
            If a file cannot be written (names the path).
        """
        inputs = self.data.get("inputs", {})
        html_path, json_file = check_output_paths(
            html_path,
            inputs.get("paths", []),
            [s["path"] for s in inputs.get("sources", [])],
            csv=csv,
        )
        if csv:
            csv_file = csv_path_for(html_path)
            self.data["outputs"] = {"csv": [csv_file.name]}
        else:
            self.data.pop("outputs", None)
        try:
            html_path.parent.mkdir(parents=True, exist_ok=True)
            text = self.render_html()
            if csv:
                _atomic_write(csv_file, self.to_csv())
            _atomic_write(html_path, text)
            _atomic_write(json_file, self.to_json())
        except OSError as exc:
            raise AnalysisError(
                f"cannot write the report to {html_path.parent}: {exc.strerror or exc}"
            ) from exc
        return html_path, json_file


_QUANTILE_KEYS = tuple(f"p{100 * q:g}" for q in QUANTILES)
#: Columns of the per-group CSV (:meth:`Report.to_csv`).
CSV_COLUMNS = (
    "variable",
    "unit",
    "grouping",
    "group",
    "files",
    "bytes",
    "ops",
    "share_files",
    "share_bytes",
    "share_ops",
    "decades",
    *_QUANTILE_KEYS,
)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- formatting
def _fmt_bytes(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(v) < 1024 or unit == "PiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} PiB"


def _fmt_sci(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return "0" if v == 0 else f"{v:.2e}"


def _fmt_pct(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{100 * float(v):.{digits}f}%"


def _fmt_num(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    return f"{float(v):.{digits}f}"


def _fmt_value(v: Any) -> str:
    """A price or parameter as given: integers with thousands separators, else ``%g``."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{float(v):g}"


#: Each filter of ``filters.removed`` as the options that set it.
FILTER_NAMES = {PIPELINE: "--pipeline", TIME_RANGE: "--since/--until"}


def _filter_text(filters: dict[str, Any]) -> str:
    """The filters of the JSON's ``filters`` in words (``pipeline merge or sort; created
    from 2026-11-24T04:20:00+00:00 until before ...``)."""
    parts = []
    if filters.get("pipelines"):
        names = list(filters["pipelines"])
        parts.append(
            "pipeline " + (", ".join(names[:-1]) + " or " if names[1:] else "") + names[-1]
        )
    since, until = filters.get("since"), filters.get("until")
    if since and until:
        parts.append(f"created from {since} until before {until}")
    elif since:
        parts.append(f"created from {since} on")
    elif until:
        parts.append(f"created before {until}")
    return "; ".join(parts) or "none"


#: What each :class:`placement.cost.CostModel` field is and its unit, for the report's table
#: (a field missing there is shown by its name).
COST_MODEL_FIELDS = FIELD_MEANINGS


def _fmt_secs(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    if v < 1e-3:
        return f"{v * 1e6:.0f} us"
    if v < 1:
        return f"{v * 1e3:.1f} ms"
    if v < 120:
        return f"{v:.1f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


# ----------------------------------------------------------------------------- building
class _Stages:
    def __init__(self, enabled: bool) -> None:
        self.times: dict[str, float] = {}
        self._bar = None
        if enabled:
            from tqdm import tqdm

            # disable=None: no bar when stderr is not a terminal (a file, a pipe, a CI log)
            self._bar = tqdm(
                total=len(STAGES), desc="report", unit="stage", leave=False, disable=None
            )
        self._start = time.perf_counter()
        self._name = ""

    def start(self, name: str) -> None:
        self._name = name
        self._start = time.perf_counter()
        if self._bar is not None:
            self._bar.set_postfix_str(name)

    def done(self) -> None:
        self.times[self._name] = time.perf_counter() - self._start
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _dist_dicts(
    agg: Aggregate, variable: str, groupings: Sequence[str], top: int
) -> dict[str, Any]:
    return {
        g: [d.to_dict() for d in distribution_table(agg, variable, g, top=top)] for g in groupings
    }


def build_report(
    paths: Sequence[str | os.PathLike[str]],
    config: ReportConfig | None = None,
    out: str | os.PathLike[str] | None = None,
) -> Report:
    """Read ``paths`` and run every analysis (see the module docstring).

    Parameters
    ----------
    paths : list of path
        Log files and directories.
    config : ReportConfig, optional
        Settings (defaults when omitted).
    out : path, optional
        Where the HTML report will be written; when given, it is checked against the
        inputs and the sources found under them before any row is read
        (:func:`check_output_paths`, with the CSV when ``config.csv``).

    Raises
    ------
    OutputError
        If ``out`` would overwrite an input or the HTML and JSON would be one file.
    InputError
        If a path is missing or empty, or no usable row is found.
    EmptySelectionError
        (An :class:`InputError`.) If the filters keep none of the usable rows; the message
        names the filter and lists the pipelines, or the creation times, the rows have.
        Names of ``config.pipelines`` that match no row, beside others that do, are a
        logged warning and the JSON's ``filters.unknown_pipelines``.
    FormatError
        If a named file's format cannot be told or its codec is not supported.
    DependencyError
        If a Darshan log is given without the ``darshan`` package.
    """
    config = config or ReportConfig()
    wall = time.perf_counter()
    stages = _Stages(config.progress)
    try:
        stages.start("discover")
        sources, issues = discover(list(paths), config.format)
        if out is not None:
            check_output_paths(out, paths, [s.path for s in sources], csv=config.csv)
        chunks, more = plan(sources)
        issues.merge(more)
        stages.done()

        stages.start("read + aggregate")
        row_filter = config.row_filter
        agg = aggregate(
            chunks,
            AggregateConfig(
                sample_rows=config.sample_rows,
                seed=config.seed,
                scheduler=config.scheduler,
                row_filter=row_filter,
            ),
            issues=issues,
            paths=list(paths),
        )
        unknown = row_filter.unknown_pipelines(agg.filtered)
        if unknown:
            logger.warning("%s", unknown_pipelines_message(row_filter, agg.filtered))
        stages.done()

        stages.start("distributions")
        json_top = max(config.top, 200)
        density = _dist_dicts(
            agg, "density", ("overall", "pipeline", "stage", "operator", "file_kind"), json_top
        )
        lifetime = _dist_dicts(agg, "lifetime", ("overall", "pipeline", "file_kind"), json_top)
        size = _dist_dicts(agg, "size", ("overall", "pipeline", "file_kind"), json_top)
        stages.done()

        stages.start("skew")
        overall_skew = skew(agg)
        pipeline_skew = skew_by(agg, "pipeline", top=json_top)
        stages.done()

        stages.start("predictability")
        pred = predictability(
            agg.sample,
            PredictabilityConfig(
                folds=config.folds, n_estimators=config.n_estimators, seed=config.seed
            ),
        )
        stages.done()

        stages.start("savings")
        if isinstance(pred, PredictabilityResult):
            # placement's features take log10 of zero densities (files without I/O): -inf
            # is meant there, so numpy's divide-by-zero warning is not shown
            with np.errstate(divide="ignore", invalid="ignore"):
                sav: SavingsResult | Unavailable = savings_curve(
                    pred.table,
                    pred.predictions,
                    pred.stage_history,
                    config.budgets,
                    max_rows=config.savings_rows,
                    seed=config.seed,
                    cost_model=config.cost_model,
                )
        else:
            sav = Unavailable(
                f"needs the cross-validated predictions, which are unavailable: {pred.reason}"
            )
        stages.done()

        stages.start("figures")
        figures = _figures(agg, density, overall_skew, pred, sav, config)
        stages.done()
    finally:
        stages.close()

    totals = agg.totals
    data: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "title": config.title or _title(paths),
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": {
            "paths": [str(p) for p in paths],
            "format": LogFormat(config.format).value,
            "sources": [
                {
                    "path": str(s.path),
                    "format": s.format.value,
                    "container": s.container.value,
                    "rows": agg.sources.get(str(s.path), 0),
                }
                for s in sources
            ],
        },
        "rows": {
            "read": agg.rows_read,
            "usable": agg.usable_rows,
            "removed_by_filters": agg.filtered.total_removed,
            "selected": agg.rows,
            "skipped_lines_records_files": agg.issues.total,
            "chunks": agg.chunks,
        },
        "filters": {
            "applied": row_filter.active,
            **row_filter.to_dict(),
            "removed": dict(agg.filtered.removed),
            "unknown_pipelines": unknown,
        },
        "issues": agg.issues.to_dict(),
        "totals": {
            "files": agg.rows,
            "runs": len(agg.runs),
            "pipelines": int(agg.runs["pipeline"].nunique()) if len(agg.runs) else 0,
            "bytes": _count(totals.get("bytes")),
            "read_bytes": _count(totals.get("read_bytes")),
            "write_bytes": _count(totals.get("write_bytes")),
            "read_ops": _count(totals.get("read_ops")),
            "write_ops": _count(totals.get("write_ops")),
            "byte_seconds": totals.get("byte_s"),
            "files_without_io": _count(totals.get("zero_ops_rows")),
            "span_s": (totals.get("deleted_max", 0.0) - totals.get("created_min", 0.0)),
            "mean_density": (totals.get("ops", 0.0) / totals["byte_s"])
            if totals.get("byte_s")
            else None,
        },
        "histogram_range": {
            "log10_low": LOG_LO,
            "log10_high": LOG_HI,
            "outside": {
                v: int(totals.get(f"outside_range_{v}", 0)) for v in ("density", "lifetime", "size")
            },
        },
        "units": {
            "density": UNITS["density"],
            "lifetime": UNITS["lifetime"],
            "size": UNITS["size"],
            "money": "US dollars",
        },
        "density": density,
        "lifetime": lifetime,
        "size": size,
        "skew": {"overall": overall_skew.to_dict(), "by_pipeline": pipeline_skew},
        "sample": {
            "rows": len(agg.sample),
            "method": agg.sample_method,
            "runs": int(agg.sample["run_id"].nunique()) if len(agg.sample) else 0,
        },
        "predictability": pred.to_dict(),
        "savings": sav.to_dict(),
        "config": {
            "scheduler": config.scheduler,
            "budgets": list(config.budgets),
            "sample_rows": config.sample_rows,
            "savings_rows": config.savings_rows,
            "folds": config.folds,
            "n_estimators": config.n_estimators,
            "seed": config.seed,
            "top": config.top,
        },
        "timings_s": dict(stages.times, total=time.perf_counter() - wall),
        "environment": {"python": platform.python_version(), "cores": len(os.sched_getaffinity(0))},
    }
    if isinstance(sav, SavingsResult):
        data["savings"]["oracle_capture_lightgbm"] = sav.capture("lightgbm")
        data["savings"]["best_heuristic"] = sav.best_heuristic()
        data["savings"]["focus_budget_index"] = focus_budget_index(sav.budgets)
    return Report(data=data, figures=figures)


def _count(value: float | None) -> int | None:
    """A count summed as a float (exact below 2**53), as an int for the JSON."""
    return None if value is None or not math.isfinite(value) else int(round(value))


def _title(paths: Sequence[Any]) -> str:
    names = [Path(str(p)).name or str(p) for p in paths]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"Intermediate-data I/O report: {shown}"


def _figures(
    agg: Aggregate,
    density: dict[str, Any],
    overall_skew: Any,
    pred: PredictabilityResult | Unavailable,
    sav: SavingsResult | Unavailable,
    config: ReportConfig,
) -> dict[str, str]:
    from logs_analysis import plots

    figs: dict[str, str] = {}
    top_pipes = [d["key"][0] for d in density["pipeline"][:8]]
    series = [(p, *histogram_series(agg, "density", "pipeline", p)) for p in top_pipes]
    figs["density_by_pipeline"] = plots.density_by_group(
        series,
        "I/O density by pipeline (largest 8)",
        "I/O density (operations per byte per second)",
    )
    for grouping, title in (("stage", "stage"), ("operator", "operator"), ("pipeline", "pipeline")):
        rows = [(" / ".join(d["key"]), d["quantiles"]) for d in density[grouping][: config.top]]
        if rows:
            figs[f"density_ranges_{grouping}"] = plots.quantile_ranges(
                rows,
                f"I/O density by {title}: p5-p95, p25-p75, median (largest {len(rows)} by files)",
                "I/O density (operations per byte per second)",
            )
    kinds = agg.histogram("lifetime", "file_kind").keys()[:6]
    figs["lifetime_size"] = plots.shape_histograms(
        [
            (
                "Lifetime by file kind",
                "lifetime (seconds)",
                [(k, *histogram_series(agg, "lifetime", "file_kind", k)) for k in kinds],
            ),
            (
                "Size by file kind",
                "size (bytes)",
                [(k, *histogram_series(agg, "size", "file_kind", k)) for k in kinds],
            ),
        ]
    )
    from logs_analysis.analyses.skew import skew_of

    curves = [("all files", overall_skew.curve["x"], overall_skew.curve["y"])]
    frame = agg.histogram("density", "pipeline").frame
    for p in top_pipes[:5]:
        c = skew_of(frame[frame["key"] == p]).curve
        curves.append((p, c["x"], c["y"]))
    figs["skew"] = plots.skew_curve(curves)
    if isinstance(pred, PredictabilityResult):
        figs["predicted_vs_true"] = plots.predicted_vs_true(
            pred.true_log_density,
            pred.predictions,
            pred.spearman.get("lightgbm", math.nan),
            seed=config.seed,
        )
        figs["importances"] = plots.importances(pred.feature_importances)
    if isinstance(sav, SavingsResult):
        figs["savings"] = plots.savings_curves(sav.budgets, sav.savings, sav.upper_bound)
        if sav.savings_by_kind:
            i = focus_budget_index(sav.budgets)
            at = {name: per[i] for name, per in sav.savings_by_kind.items()}
            figs["savings_by_kind"] = plots.savings_by_kind(at, sav.budgets[i])
    return figs
