"""Row filters of a report: which pipelines, and a range of file creation times.

A :class:`RowFilter` is checked when it is made (names, times, a range that holds no
time) and applied to each chunk's usable rows on the Dask worker that read them
(:func:`logs_analysis.aggregate.process_chunk`), after the row checks and the duplicate
check and before anything is reduced, so every analysis (distributions, skew, the sample
for predictability and savings) sees the same rows. Rows a filter removes are counted per
filter (:class:`FilterStats`), not as issues: malformed and duplicate rows are counted
whatever the filters.

Filters apply one after the other:

``pipelines``
    A row is kept when its ``pipeline`` is one of the names (exact, case-sensitive).
    Spark event logs fill ``pipeline`` with the application's name ("App Name"), Darshan
    logs with the executable's name.
``since`` / ``until``
    A row is kept when ``since <= created_at < until`` (either end may be open);
    ``created_at`` is when the file was created (Spark: the task's launch; Darshan: the
    file's first open). Times are ISO 8601 dates or datetimes; one without a UTC offset
    is taken as UTC.

Worked example: ``--pipeline merge --since 2026-11-24T04:20 --until 2026-11-24T04:21``
keeps the files of pipeline ``merge`` created in that minute (UTC); its ``removed``
counts are ``{"pipeline": rows of other pipelines, "created_at": rows of merge created
outside the minute}``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logs_analysis.errors import AnalysisConfigError

__all__ = [
    "PIPELINE",
    "TIME_RANGE",
    "FilterStats",
    "RowFilter",
    "empty_selection_message",
    "parse_time",
    "unknown_pipelines_message",
]

#: Key of the pipeline filter in :attr:`FilterStats.removed` (the column it reads).
PIPELINE = "pipeline"
#: Key of the creation-time filter in :attr:`FilterStats.removed` (the column it reads).
TIME_RANGE = "created_at"
#: Pipelines named in a message, largest first; the rest are counted.
MAX_LISTED = 30
_UTC = _dt.timezone.utc
_TIME_EXAMPLES = "2026-11-24, 2026-11-24T04:20:00 or 2026-11-24T05:20:00+01:00"


def parse_time(value: object, name: str) -> _dt.datetime:
    """``value`` as an aware UTC datetime.

    Parameters
    ----------
    value : str or datetime.datetime or datetime.date
        An ISO 8601 date or datetime (``2026-11-24``, ``2026-11-24T04:20:00Z``,
        ``2026-11-24 05:20+01:00``); without a UTC offset it is taken as UTC.
    name : str
        The option's name (``since`` or ``until``), for the message.

    Raises
    ------
    AnalysisConfigError
        If ``value`` is not a date or datetime, or its offset puts it outside the years 1 to
        9999 in UTC, naming the option and the value.
    """
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise AnalysisConfigError(
                f"{name}={value!r} (--{name}) is not an ISO 8601 date or datetime; "
                f"give one such as {_TIME_EXAMPLES} (UTC unless it gives an offset)"
            ) from None
    elif isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, _dt.datetime):
        raise AnalysisConfigError(
            f"{name}={value!r} (--{name}) must be an ISO 8601 string or a datetime "
            f"(e.g. {_TIME_EXAMPLES})"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=_UTC)
    try:
        return value.astimezone(_UTC)
    except OverflowError:  # its offset moves it past the first or the last day datetime holds
        raise AnalysisConfigError(
            f"{name}={value.isoformat()!r} (--{name}) is out of range: in UTC it falls "
            f"outside the years 1 to 9999; give a time within them (e.g. {_TIME_EXAMPLES})"
        ) from None


def _iso(value: _dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _utc_text(seconds: float) -> str:
    """Seconds since the Unix epoch as an ISO 8601 UTC time (to the second)."""
    try:
        return _dt.datetime.fromtimestamp(seconds, _UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g} s since the Unix epoch"


@dataclasses.dataclass
class FilterStats:
    """What the filters did to the rows of one or more chunks (merged with :meth:`merge`).

    Attributes
    ----------
    removed : dict of str to int
        Usable rows removed by each filter (:data:`PIPELINE`, :data:`TIME_RANGE`), in the
        order they apply: a row removed by the first is not counted by the second.
    pipelines : dict of str to int
        Usable rows of each pipeline before the pipeline filter (filled only when
        pipelines are named, to tell the names that match nothing).
    created_min, created_max : float
        Earliest and latest ``created_at`` (seconds since the Unix epoch) of the rows the
        time range was applied to (``inf`` and ``-inf`` when none), to say what a range
        that kept nothing missed.
    """

    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    pipelines: dict[str, int] = dataclasses.field(default_factory=dict)
    created_min: float = math.inf
    created_max: float = -math.inf

    @property
    def total_removed(self) -> int:
        """Usable rows removed by all the filters together."""
        return int(sum(self.removed.values()))

    def merge(self, other: FilterStats) -> FilterStats:
        """Add ``other`` to this one (in place); returns ``self``."""
        for key, n in other.removed.items():
            self.removed[key] = self.removed.get(key, 0) + n
        for name, n in other.pipelines.items():
            self.pipelines[name] = self.pipelines.get(name, 0) + n
        self.created_min = min(self.created_min, other.created_min)
        self.created_max = max(self.created_max, other.created_max)
        return self


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowFilter:
    """Which usable rows a report analyses (see the module docstring).

    Parameters
    ----------
    pipelines : sequence of str
        Keep only the rows of these pipelines (none: every pipeline). Repeated names
        count once.
    since, until : str or datetime or None
        Keep only the files created at or after ``since`` and before ``until`` (ISO 8601;
        UTC unless an offset is given; :func:`parse_time`). Stored as aware UTC datetimes.

    Raises
    ------
    AnalysisConfigError
        If a name is not a non-empty string, a time does not parse, or ``since`` is not
        before ``until`` (the message names ``--since`` and ``--until``).
    """

    pipelines: tuple[str, ...] = ()
    since: _dt.datetime | str | None = None
    until: _dt.datetime | str | None = None

    def __post_init__(self) -> None:
        names = self.pipelines
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise AnalysisConfigError(
                f"pipelines={names!r} must be a sequence of pipeline names, e.g. ('merge',)"
            )
        for name in names:
            if not isinstance(name, str) or not name:
                raise AnalysisConfigError(
                    f"pipeline name {name!r} (--pipeline) must be a non-empty string"
                )
        object.__setattr__(self, "pipelines", tuple(dict.fromkeys(names)))
        for key in ("since", "until"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, parse_time(value, key))
        since, until = self.since_time, self.until_time
        if since is not None and until is not None and since >= until:
            raise AnalysisConfigError(
                f"--since {since.isoformat()} is not before --until {until.isoformat()}: no "
                "file can be created in that range; give a --since earlier than --until"
            )

    @property
    def since_time(self) -> _dt.datetime | None:
        """``since`` as an aware UTC datetime (None: open)."""
        return self.since if isinstance(self.since, _dt.datetime) else None

    @property
    def until_time(self) -> _dt.datetime | None:
        """``until`` as an aware UTC datetime (None: open)."""
        return self.until if isinstance(self.until, _dt.datetime) else None

    @property
    def active(self) -> bool:
        """Whether any filter is set (an inactive one keeps every row, at no cost)."""
        return bool(self.pipelines) or self.since is not None or self.until is not None

    def describe(self, which: str | None = None) -> str:
        """The filters as command-line options (``--pipeline a --since ...``); ``which``
        (:data:`PIPELINE` or :data:`TIME_RANGE`) limits it to one filter."""
        parts = []
        if which in (None, PIPELINE):
            parts += [f"--pipeline {name}" for name in self.pipelines]
        if which in (None, TIME_RANGE):
            for option, value in (("--since", self.since_time), ("--until", self.until_time)):
                if value is not None:
                    parts.append(f"{option} {value.isoformat()}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """``pipelines`` (list), ``since`` and ``until`` (ISO 8601 UTC, or None)."""
        return {
            "pipelines": list(self.pipelines),
            "since": _iso(self.since_time),
            "until": _iso(self.until_time),
        }

    def apply(self, table: pa.Table) -> tuple[pa.Table, FilterStats]:
        """The rows of ``table`` that pass every filter, and what each filter removed.

        Parameters
        ----------
        table : pyarrow.Table
            Usable rows in the placement log schema (``pipeline`` may be
            dictionary-encoded; ``created_at`` in seconds since the Unix epoch, not null).
        """
        stats = FilterStats()
        if not self.active or table.num_rows == 0:
            return table, stats
        if self.pipelines:
            column = table["pipeline"]
            counts = pc.value_counts(column.combine_chunks())
            stats.pipelines = {
                str(value): int(n)
                for value, n in zip(
                    counts.field("values").to_pylist(),
                    counts.field("counts").to_pylist(),
                    strict=True,
                )
            }
            keep = pc.fill_null(pc.is_in(column, value_set=pa.array(self.pipelines)), False)
            before = table.num_rows
            table = table.filter(keep)
            stats.removed[PIPELINE] = before - table.num_rows
        since, until = self.since_time, self.until_time
        if (since is not None or until is not None) and table.num_rows:
            created = np.asarray(
                table["created_at"].to_numpy(zero_copy_only=False), dtype=np.float64
            )
            stats.created_min, stats.created_max = float(created.min()), float(created.max())
            keep_time = np.ones(len(created), dtype=bool)
            if since is not None:
                keep_time &= created >= since.timestamp()
            if until is not None:
                keep_time &= created < until.timestamp()
            removed = int(len(created) - keep_time.sum())
            if removed:
                table = table.filter(pa.array(keep_time))
            stats.removed[TIME_RANGE] = removed
        elif since is not None or until is not None:
            stats.removed[TIME_RANGE] = 0
        return table, stats

    def unknown_pipelines(self, stats: FilterStats) -> list[str]:
        """The names given that no usable row has (in the order given)."""
        return [name for name in self.pipelines if not stats.pipelines.get(name)]


def _listed(pipelines: Mapping[str, int]) -> str:
    """``a (1,204 files), b (77 files)...``, largest first, at most :data:`MAX_LISTED`."""
    ordered = sorted(pipelines.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{name} ({n:,} files)" for name, n in ordered[:MAX_LISTED])
    if len(ordered) > MAX_LISTED:
        text += f" and {len(ordered) - MAX_LISTED} more"
    return text or "none"


def _suggestions(names: Sequence[str], known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for names close to a known one, else ``""``."""
    close = {}
    for name in names:
        lower = name.lower()
        match = (
            difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            or [k for k in known if k.lower() == lower]
            or [k for k in known if lower in k.lower()]
        )
        if match:
            close[name] = match[0]
    if not close:
        return ""
    return " (did you mean " + ", ".join(f"{v!r} for {k!r}" for k, v in close.items()) + "?)"


def unknown_pipelines_message(row_filter: RowFilter, stats: FilterStats) -> str:
    """Why some ``--pipeline`` names selected nothing, with the pipelines the logs hold."""
    unknown = row_filter.unknown_pipelines(stats)
    names = ", ".join(repr(name) for name in unknown)
    return (
        f"--pipeline {names} {'matches' if len(unknown) == 1 else 'match'} no usable row"
        f"{_suggestions(unknown, list(stats.pipelines))}; the pipelines in these logs are: "
        f"{_listed(stats.pipelines)}"
    )


def empty_selection_message(row_filter: RowFilter, stats: FilterStats, usable: int) -> str:
    """The error text for filters that removed every usable row: it names the filter that
    removed the last rows and what the rows hold (the pipelines, the creation times), and
    the ``--pipeline`` names that matched no row.

    Parameters
    ----------
    row_filter : RowFilter
    stats : FilterStats
        What the filters did (:meth:`RowFilter.apply`, merged over the chunks).
    usable : int
        Usable rows before the filters.
    """
    left = usable - stats.removed.get(PIPELINE, 0)
    if row_filter.pipelines and left <= 0:
        return (
            f"the filters leave none of the {usable:,} usable rows to analyse: "
            f"{unknown_pipelines_message(row_filter, stats)}; give --pipeline one of them"
        )
    unknown = row_filter.unknown_pipelines(stats) if row_filter.pipelines else []
    found = [name for name in row_filter.pipelines if name not in unknown]
    of = f"the {left:,} rows of pipeline {', '.join(found)}" if row_filter.pipelines else "them"
    span = (
        f"they were created from {_utc_text(stats.created_min)} to "
        f"{_utc_text(stats.created_max)} (UTC)"
        if math.isfinite(stats.created_min)
        else "their creation times are unknown"
    )
    return (
        f"the filters leave none of the {usable:,} usable rows to analyse: "
        f"{row_filter.describe(TIME_RANGE)} keeps none of {of}; {span}; "
        "widen the range or leave it out"
        + (f"; and {unknown_pipelines_message(row_filter, stats)}" if unknown else "")
    )
