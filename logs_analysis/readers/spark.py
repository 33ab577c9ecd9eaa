"""Spark event logs -> intermediate-data records in the placement log schema.

Spark logs no per-file operations, so each record is built from task metrics. This is
the mapping (times in the log are milliseconds; rows carry seconds):

Shuffle map output (``file_kind = "shuffle"``)
    One record per ``SparkListenerTaskEnd`` whose "Shuffle Write Metrics" show bytes or
    records written: the map task's shuffle data file.

    ============================  ==================================================
    column                        from
    ============================  ==================================================
    ``file_id``                   ``<app id>/shuffle_<stage>.<attempt>_<task id>``
    ``pipeline`` / ``run_id``     "App Name" / "App ID" (+ ``/<attempt>`` if any)
    ``stage`` / ``job_id``        "Stage Name" / the job whose "Stage IDs" hold it
    ``worker`` / ``host``         "Executor ID" / "Host" of the task
    ``created_at``                the task's "Launch Time"
    ``deleted_at``                the last "Completion Time" of the stages that read
                                  it (its children, see below); else the end of its
                                  job; else the application's end; else the last
                                  timestamp in the log. A failed or killed task's
                                  output is discarded at its "Finish Time".
    ``size_bytes``,               "Shuffle Bytes Written"
    ``write_bytes``
    ``write_ops``                 one write per reduce partition (segment): the
                                  children's "Number of Tasks", capped by "Shuffle
                                  Records Written", at least 1
    ``read_ops``                  one read per block fetched: the children's
                                  "Local Blocks Fetched" + "Remote Blocks Fetched",
                                  shared evenly among the parent stages' map outputs
    ``read_bytes``                the children's "Local Bytes Read" + "Remote Bytes
                                  Read", shared in proportion to bytes written
    ``operator``                  the stage name's call (``"reduceByKey at ..."`` ->
                                  ``groupby``; see :data:`OPERATORS`)
    ``n_partitions_in`` / ``out`` this stage's / its children's "Number of Tasks"
    ``input_bytes``               the task's "Input Metrics" and shuffle bytes read
    ``n_workers``                 executors added and not removed at launch (>= 1)
    ``expected_size_bytes``,      unknown to Spark: null
    ``priority``,
    ``memory_pressure``, ``tier``
    ============================  ==================================================

    A stage's children are the stages whose "Parent IDs" list it (Spark >= 2); logs
    without "Parent IDs" (Spark 1.x) take the later stages of the same job that fetched
    shuffle blocks.

Spill (``file_kind = "spill"``)
    One record per task with "Disk Bytes Spilled" > 0: ``size_bytes = write_bytes =
    read_bytes`` = the bytes spilled (written once, merged back once), ``write_ops =
    read_ops = 1`` (the number of spill files is not logged: a lower bound),
    ``created_at`` / ``deleted_at`` = the task's launch / finish (spill files are
    removed when the task ends), ``file_id = <app id>/spill_<stage>.<attempt>_<task>``.

Tasks that wrote no shuffle data and spilled nothing yield no record (an application
without shuffles yields none, which is not an error by itself). Lines that are not JSON,
events that are not objects, task-end events without the fields above and events whose
fields have the wrong type (a "Task ID" that is a string, "Stage IDs" that is not a list,
a task metric such as "Shuffle Bytes Written" given as a string, a count too large for its
column; the detail names the field) are counted in :class:`~logs_analysis.issues.ReadIssues`
with their line numbers, and the rest of the log is read.

Rolling event logs (a directory ``eventlog_v2_<app>`` of ``events_<n>_<app>[.codec]``
files, Spark >= 3) are read as one stream in index order; compressed files are
decompressed by :mod:`logs_analysis.readers.compression`. A compressed file cut short
(Spark writes in-progress logs this way) keeps the lines decoded before the cut and
counts one "truncated compressed stream" issue naming the file, as a plain-text log cut
short keeps its complete lines (a file cut before its first line is that one issue, not
also "not a Spark event log").

A file (e.g. one forced with ``--format spark``) in which no line is a listener event is
not an event log: it counts once, as an input not read (:data:`NO_EVENTS`, the detail
saying how many of its lines are not JSON and quoting the first), not each line as a
malformed event.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from logs_analysis.errors import FormatError, TruncatedStreamError
from logs_analysis.issues import ReadIssues
from logs_analysis.readers.base import ChunkResult
from logs_analysis.readers.compression import iter_lines, open_decompressed
from placement.schema import SCHEMA, conform

__all__ = [
    "NO_EVENTS",
    "OPERATORS",
    "SparkChunk",
    "operator_of",
    "plan_spark",
    "read_spark_events",
]

_EVENTS_RE = re.compile(r"^events_(\d+)_")
_INT64_MAX = int(np.iinfo(np.int64).max)
_INT32_MAX = int(np.iinfo(np.int32).max)
#: Reason of a file (or rolling directory) read as a Spark event log in which no line is a
#: listener event: one input not read (:data:`logs_analysis.issues.SKIPPED_INPUT_REASONS`),
#: its lines not counted as malformed events; the detail says what it holds.
NO_EVENTS = "not a Spark event log: no listener events (skipped)"


class _MalformedEvent(ValueError):
    """An event whose fields have types or values Spark never writes."""


#: Spark call names (first word of a stage name) -> placement operator vocabulary.
OPERATORS: dict[str, str] = {
    **dict.fromkeys(
        (
            "reducebykey",
            "groupbykey",
            "aggregatebykey",
            "combinebykey",
            "foldbykey",
            "countbykey",
            "groupby",
            "agg",
        ),
        "groupby",
    ),
    **dict.fromkeys(
        ("join", "cogroup", "leftouterjoin", "rightouterjoin", "fullouterjoin", "subtractbykey"),
        "merge",
    ),
    **dict.fromkeys(
        ("sortbykey", "sortby", "orderby", "sort", "repartitionandsortwithinpartitions"), "sort"
    ),
    **dict.fromkeys(("repartition", "partitionby", "coalesce", "distinct", "shuffle"), "shuffle"),
    **dict.fromkeys(("cache", "persist"), "cache"),
}


def operator_of(stage_name: str) -> str:
    """Operator of a Spark stage from its name (``"reduceByKey at x.scala:3"`` -> ``groupby``)."""
    word = stage_name.strip().split(" ", 1)[0].lower() if stage_name else ""
    word = word.rsplit(".", 1)[-1].strip("$")
    return OPERATORS.get(word, word or "other")


@dataclasses.dataclass
class _Stage:
    name: str = ""
    n_tasks: int | None = None
    parents: list[int] | None = None
    job: int | None = None
    submitted: float | None = None
    completed: float | None = None
    blocks_fetched: int = 0
    bytes_read: int = 0


@dataclasses.dataclass
class _Task:
    stage: int
    attempt: int
    task_id: int
    executor: str
    host: str
    launch: float
    finish: float
    ok: bool
    shuffle_bytes: int
    shuffle_records: int
    spilled: int
    input_bytes: int
    line: int


def _num(d: Any, *keys: str) -> int:
    """The metric at ``d[keys[0]][keys[1]]...`` as an int; 0 when it (or a level above it)
    is absent or null. A value Spark never writes there (a string such as ``"1710"``, a
    boolean, a level that is not an object, a number beyond int64) is malformed."""
    for i, key in enumerate(keys):
        if d is None:
            return 0
        if not isinstance(d, dict):
            name = "/".join(keys[:i]) or "the metrics"
            raise _MalformedEvent(f"{name}={_short(d)} is not an object")
        d = d.get(key)
    if d is None:
        return 0
    if not isinstance(d, (int, float)) or isinstance(d, bool):
        raise _MalformedEvent(f"{'/'.join(keys)}={_short(d)} is not a number")
    if not (isinstance(d, int) or math.isfinite(d)) or not -_INT64_MAX <= d <= _INT64_MAX:
        raise _MalformedEvent(f"{'/'.join(keys)}={d!r} is out of range")
    return int(d)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _opt_int(value: Any, name: str, default: int = 0, hi: int = _INT64_MAX) -> int:
    """``value`` as a non-negative int (``default`` when absent); anything else is malformed."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _MalformedEvent(f"{name}={value!r} is not an integer")
    if not 0 <= value <= hi:
        raise _MalformedEvent(f"{name}={value!r} is out of range")
    return value


def event_files(path: Path) -> list[Path]:
    """The files of an event log: itself, or a rolling directory's ``events_*`` in index order."""
    if not path.is_dir():
        return [path]
    files = [p for p in path.iterdir() if _EVENTS_RE.match(p.name)]
    if not files:
        raise FormatError(f"{path}: a rolling event-log directory without events_<n>_<app> files")
    return sorted(files, key=lambda p: int(_EVENTS_RE.match(p.name).group(1)))  # type: ignore[union-attr]


def _lines(path: Path, issues: ReadIssues) -> Iterator[tuple[str, int, bytes]]:
    """``(file, line number, line)`` of every file of the log; a compressed file cut short
    yields its complete lines and counts one "truncated compressed stream" issue."""
    for file in event_files(path):
        _, chunks = open_decompressed(file)
        n = 0
        try:
            for n, line in enumerate(iter_lines(chunks), 1):
                yield str(file), n, line
        except TruncatedStreamError as exc:
            issues.add(
                "truncated compressed stream",
                str(file),
                f"after line {n}",
                f"{exc}; the {n} line(s) decoded before the cut were read",
            )


def read_spark_events(path: str | Path) -> ChunkResult:
    """Records of one Spark application's event log (a file or a rolling directory).

    Raises
    ------
    FormatError
        If the file is compressed with an unsupported codec or the stream is corrupt.
    OSError
        If it cannot be read.
    """
    path = Path(path)
    issues = ReadIssues()
    app_name = app_id = ""
    app_end: float | None = None
    last_ts: float | None = None
    stages: dict[int, _Stage] = defaultdict(_Stage)
    jobs_end: dict[int, float] = {}
    tasks: list[_Task] = []
    executors: list[tuple[float, int]] = []  # (time, +1/-1)
    events = 0
    lines = invalid = 0  # non-blank lines, and those that are not JSON
    first: tuple[str, int, bytes] | None = None  # the first non-blank line

    def stage_info(info: dict[str, Any], job: int | None = None) -> None:
        sid = info.get("Stage ID")
        if not isinstance(sid, int) or isinstance(sid, bool):
            return
        st = stages[sid]
        st.name = str(info.get("Stage Name") or st.name)
        if isinstance(info.get("Number of Tasks"), int):
            st.n_tasks = _opt_int(info["Number of Tasks"], "Number of Tasks", hi=_INT32_MAX)
        if isinstance(info.get("Parent IDs"), list):
            st.parents = [p for p in info["Parent IDs"] if isinstance(p, int)]
        if job is not None:
            st.job = job
        for key, attr in (("Submission Time", "submitted"), ("Completion Time", "completed")):
            if isinstance(info.get(key), (int, float)):
                setattr(st, attr, info[key] / 1000.0)

    for file, n, raw in _lines(path, issues):
        if not raw.strip():
            continue
        lines += 1
        if first is None:
            first = (file, n, raw)
        try:
            ev = json.loads(raw)
        except ValueError as exc:
            invalid += 1
            issues.add("invalid JSON", file, detail=f"{exc}: {raw[:80]!r}", line=n)
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("Event"), str):
            issues.add("not a Spark listener event", file, detail=repr(raw[:80]), line=n)
            continue
        events += 1
        kind = ev["Event"]
        try:
            for key in ("Timestamp", "Completion Time", "Submission Time"):
                if isinstance(ev.get(key), (int, float)):
                    last_ts = max(last_ts or 0.0, ev[key] / 1000.0)
            if kind == "SparkListenerApplicationStart":
                app_name = str(ev.get("App Name") or "")
                app_id = str(ev.get("App ID") or "")
                if ev.get("App Attempt ID"):
                    app_id = f"{app_id}/{ev['App Attempt ID']}"
            elif kind == "SparkListenerApplicationEnd":
                if isinstance(ev.get("Timestamp"), (int, float)):
                    app_end = ev["Timestamp"] / 1000.0
            elif kind == "SparkListenerExecutorAdded" and isinstance(
                ev.get("Timestamp"), (int, float)
            ):
                executors.append((ev["Timestamp"] / 1000.0, 1))
            elif kind == "SparkListenerExecutorRemoved" and isinstance(
                ev.get("Timestamp"), (int, float)
            ):
                executors.append((ev["Timestamp"] / 1000.0, -1))
            elif kind == "SparkListenerJobStart":
                job = ev.get("Job ID")
                stage_ids = ev.get("Stage IDs")
                if stage_ids is not None and not isinstance(stage_ids, list):
                    raise _MalformedEvent(f"Stage IDs={stage_ids!r} is not a list")
                for info in ev.get("Stage Infos") or []:
                    if isinstance(info, dict):
                        stage_info(info, job if isinstance(job, int) else None)
                for sid in stage_ids or []:
                    if isinstance(sid, int) and isinstance(job, int):
                        stages[sid].job = job
            elif kind == "SparkListenerJobEnd":
                if isinstance(ev.get("Job ID"), int) and isinstance(
                    ev.get("Completion Time"), (int, float)
                ):
                    jobs_end[ev["Job ID"]] = ev["Completion Time"] / 1000.0
            elif kind in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
                if isinstance(ev.get("Stage Info"), dict):
                    stage_info(ev["Stage Info"])
            elif kind == "SparkListenerTaskEnd":
                task = _task_end(ev, file, n, issues)
                if task is None:
                    continue
                metrics = ev.get("Task Metrics")
                if not isinstance(metrics, dict):
                    metrics = {}  # as _task_end reads it: a task without metrics
                st = stages[task.stage]
                # both read before either is added: a malformed one leaves the stage as it was
                blocks = _num(metrics, "Shuffle Read Metrics", "Local Blocks Fetched") + _num(
                    metrics, "Shuffle Read Metrics", "Remote Blocks Fetched"
                )
                read = _num(metrics, "Shuffle Read Metrics", "Local Bytes Read") + _num(
                    metrics, "Shuffle Read Metrics", "Remote Bytes Read"
                )
                st.blocks_fetched += blocks
                st.bytes_read += read
                tasks.append(task)
        except (_MalformedEvent, TypeError, ValueError, OverflowError) as exc:
            issues.add(
                "malformed Spark event",
                file,
                detail=f"{kind}: {exc}",
                line=n,
            )
    if events == 0 and not issues.counts.get("truncated compressed stream"):
        # not an event log (a stream cut before its first line is counted once, as
        # truncated, above): one input not read, not its lines as malformed events
        issues = ReadIssues()
        issues.add(NO_EVENTS, str(path), detail=_not_events_detail(lines, invalid, first))
    return _records(
        str(path),
        app_name,
        app_id or path.name,
        app_end,
        last_ts,
        stages,
        jobs_end,
        tasks,
        executors,
        issues,
    )


def _not_events_detail(lines: int, invalid: int, first: tuple[str, int, bytes] | None) -> str:
    """What a file without Spark listener events holds, in words."""
    if first is None:
        return "it holds only blank lines"
    file, n, raw = first
    other = lines - invalid
    kinds = ", ".join(
        text
        for count, text in (
            (invalid, f"{invalid:,} invalid JSON"),
            (other, f'{other:,} JSON but not an object with an "Event" name'),
        )
        if count
    )
    return (
        f"none of its {lines:,} non-blank line(s) is a Spark listener event ({kinds}); "
        f"{Path(file).name} line {n}: {raw[:80]!r}"
    )


def _task_end(ev: dict[str, Any], file: str, n: int, issues: ReadIssues) -> _Task | None:
    info = ev.get("Task Info")
    metrics = ev.get("Task Metrics")
    stage = ev.get("Stage ID")
    if not isinstance(info, dict) or not isinstance(stage, int):
        issues.add(
            "task end without Task Info or Stage ID", file, detail=repr(str(ev)[:80]), line=n
        )
        return None
    launch, finish = info.get("Launch Time"), info.get("Finish Time")
    if not isinstance(launch, (int, float)) or not isinstance(finish, (int, float)):
        issues.add(
            "task end without Launch/Finish Time",
            file,
            detail=f"task {info.get('Task ID')}",
            line=n,
        )
        return None
    if metrics is None:
        metrics = {}  # failed tasks of old Spark versions carry no metrics: nothing written
    elif not isinstance(metrics, dict):
        raise _MalformedEvent(f"Task Metrics={_short(metrics)} is not an object")
    reason = ev.get("Task End Reason")
    ok = not info.get("Failed") and not info.get("Killed")
    if isinstance(reason, dict) and reason.get("Reason") not in (None, "Success"):
        ok = False
    return _Task(
        stage=stage,
        attempt=_opt_int(ev.get("Stage Attempt ID"), "Stage Attempt ID"),
        task_id=_opt_int(info.get("Task ID"), "Task ID"),
        executor=str(info.get("Executor ID") or ""),
        host=str(info.get("Host") or metrics.get("Host Name") or ""),
        launch=launch / 1000.0,
        finish=finish / 1000.0,
        ok=ok,
        shuffle_bytes=_num(metrics, "Shuffle Write Metrics", "Shuffle Bytes Written"),
        shuffle_records=_num(metrics, "Shuffle Write Metrics", "Shuffle Records Written"),
        spilled=_num(metrics, "Disk Bytes Spilled"),
        input_bytes=_num(metrics, "Input Metrics", "Bytes Read")
        + _num(metrics, "Shuffle Read Metrics", "Local Bytes Read")
        + _num(metrics, "Shuffle Read Metrics", "Remote Bytes Read"),
        line=n,
    )


def _children(stages: dict[int, _Stage]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    if any(st.parents is not None for st in stages.values()):
        for sid, st in stages.items():
            for p in st.parents or []:
                out[p].append(sid)
        return out
    # Spark 1.x: no "Parent IDs"; later stages of the same job that fetched shuffle blocks
    for sid, st in stages.items():
        for cid, child in stages.items():
            if (
                cid > sid
                and child.blocks_fetched > 0
                and child.job is not None
                and child.job == st.job
            ):
                out[sid].append(cid)
    return out


def _records(
    source: str,
    app_name: str,
    app_id: str,
    app_end: float | None,
    last_ts: float | None,
    stages: dict[int, _Stage],
    jobs_end: dict[int, float],
    tasks: list[_Task],
    executors: list[tuple[float, int]],
    issues: ReadIssues,
) -> ChunkResult:
    children = _children(stages)
    parents_of: dict[int, list[int]] = defaultdict(list)
    for p, cs in children.items():
        for c in cs:
            parents_of[c].append(p)
    writers = [t for t in tasks if t.shuffle_bytes > 0 or t.shuffle_records > 0]
    written_by_stage: dict[int, int] = defaultdict(int)
    maps_by_stage: dict[int, int] = defaultdict(int)
    for t in writers:
        written_by_stage[t.stage] += t.shuffle_bytes
        maps_by_stage[t.stage] += 1
    executors.sort()
    ex_times = [t for t, _ in executors]
    ex_level = []
    level = 0
    for _, d in executors:
        level += d
        ex_level.append(level)

    def n_workers(at: float) -> int:
        import bisect

        k = bisect.bisect_right(ex_times, at)
        return max(ex_level[k - 1] if k else 0, 1)

    end_of_app = app_end if app_end is not None else last_ts
    rows: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    labels: list[str] = []

    largest = {  # of each integer column
        f.name: _INT32_MAX if f.type == pa.int32() else _INT64_MAX
        for f in SCHEMA
        if pa.types.is_integer(f.type)
    }

    def add(line: int, **values: Any) -> bool:
        """Append a row; a count beyond its column (a sum of counts that each fit, such as a
        task's input and shuffle bytes read) is a malformed event: counted, and no row."""
        for name, hi in largest.items():
            value = values.get(name)
            if isinstance(value, int) and not -hi <= value <= hi:
                detail = f"SparkListenerTaskEnd: {name}={value} is out of range"
                issues.add("malformed Spark event", source, detail=detail, line=line)
                return False
        for name in SCHEMA.names:
            rows[name].append(values.get(name))
        return True

    for t in tasks:
        st = stages.get(t.stage) or _Stage()
        common = {
            "pipeline": app_name or app_id,
            "run_id": app_id,
            "stage": st.name or f"stage {t.stage}",
            "job_id": None if st.job is None else str(st.job),
            "worker": t.executor or None,
            "host": t.host or None,
            "created_at": t.launch,
            "operator": operator_of(st.name),
            "n_partitions_in": st.n_tasks,
            "input_bytes": t.input_bytes,
            "n_workers": n_workers(t.launch),
        }
        if t.shuffle_bytes > 0 or t.shuffle_records > 0:
            kids = [stages[c] for c in children.get(t.stage, []) if c in stages]
            ends = [k.completed for k in kids if k.completed is not None]
            if not t.ok:
                deleted = t.finish
            elif ends:
                deleted = max(ends)
            elif st.job is not None and st.job in jobs_end:
                deleted = jobs_end[st.job]
            else:
                deleted = end_of_app if end_of_app is not None else t.finish
            deleted = max(deleted, t.finish)
            n_out = sum(k.n_tasks or 0 for k in kids) or None
            reads = read_bytes = 0.0
            for c in children.get(t.stage, []):
                child = stages[c]
                parents = parents_of.get(c, [t.stage])
                maps = sum(maps_by_stage.get(p, 0) for p in parents) or 1
                written = sum(written_by_stage.get(p, 0) for p in parents) or 1
                reads += child.blocks_fetched / maps
                read_bytes += child.bytes_read * (t.shuffle_bytes / written)
            write_ops = max(
                1, min(n_out, t.shuffle_records) if n_out and t.shuffle_records else (n_out or 1)
            )
            if add(
                t.line,
                **common,
                file_id=f"{app_id}/shuffle_{t.stage}.{t.attempt}_{t.task_id}",
                file_kind="shuffle",
                n_partitions_out=n_out,
                deleted_at=deleted,
                size_bytes=t.shuffle_bytes,
                read_ops=round(reads),
                write_ops=int(write_ops),
                read_bytes=round(read_bytes),
                write_bytes=t.shuffle_bytes,
            ):
                labels.append(f"line {t.line} (stage {t.stage} task {t.task_id} shuffle)")
        if t.spilled > 0:
            if add(
                t.line,
                **common,
                file_id=f"{app_id}/spill_{t.stage}.{t.attempt}_{t.task_id}",
                file_kind="spill",
                n_partitions_out=None,
                deleted_at=max(t.finish, t.launch),
                size_bytes=t.spilled,
                read_ops=1,
                write_ops=1,
                read_bytes=t.spilled,
                write_bytes=t.spilled,
            ):
                labels.append(f"line {t.line} (stage {t.stage} task {t.task_id} spill)")
    table = conform(
        pa.table({name: pa.array(rows[name], SCHEMA.field(name).type) for name in SCHEMA.names})
    )
    return ChunkResult(table, issues, source, labels=labels)


@dataclasses.dataclass(frozen=True)
class SparkChunk:
    """One Spark application's event log (a file or a rolling directory)."""

    source: str
    estimated_rows: int

    def load(self) -> ChunkResult:
        try:
            return read_spark_events(self.source)
        except (FormatError, OSError) as exc:
            issues = ReadIssues()
            issues.add("unreadable event log (skipped)", self.source, detail=str(exc))
            return ChunkResult(SCHEMA.empty_table(), issues, self.source)


def plan_spark(path: str | Path) -> tuple[list[SparkChunk], ReadIssues]:
    """One chunk per application log; rows are estimated at one per 2 KiB of log.

    A rolling event-log directory that cannot be listed, or whose files cannot be
    examined, is skipped and counted ("unreadable event log (skipped)"), not fatal.
    """
    path = Path(path)
    try:
        size = sum(f.stat().st_size for f in event_files(path))
    except (FormatError, OSError) as exc:
        issues = ReadIssues()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        issues.add("unreadable event log (skipped)", str(path), detail=why)
        return [], issues
    return [SparkChunk(str(path), max(1, math.ceil(size / 2048)))], ReadIssues()
