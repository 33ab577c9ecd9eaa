"""Darshan logs (HPC I/O characterisation) -> placement log rows, through PyPI ``darshan``.

An optional extra: ``pip install 'dataplane[darshan]'``. Without it, reading a Darshan
log raises :class:`~logs_analysis.errors.DependencyError` saying so.

One row per POSIX module record (a file as seen by one rank, or by all ranks when
Darshan reduced a shared file: rank -1). Darshan sees opens and closes, not creation and
deletion, so a row's life is the span the file was open:

=========================  ============================================================
column                     from
=========================  ============================================================
``file_id``                ``<job id>/<rank>/<record id>``
``pipeline``               the executable's name (first word of ``exe``, base name)
``run_id`` / ``job_id``    ``<pipeline>-<job id>-<start time>`` / the job id
``stage``                  the file's directory (files of one directory are one stage)
``worker``                 the rank (``-1`` = all ranks of a shared file)
``created_at``             job start + ``POSIX_F_OPEN_START_TIMESTAMP``
``deleted_at``             job start + ``POSIX_F_CLOSE_END_TIMESTAMP`` (job end if the
                           file was never closed)
``size_bytes``             1 + the largest offset read or written
                           (``POSIX_MAX_BYTE_READ`` / ``_WRITTEN``)
``read_ops``/``write_ops`` ``POSIX_READS`` / ``POSIX_WRITES``
``read_bytes`` / ``write_  ``POSIX_BYTES_READ`` / ``POSIX_BYTES_WRITTEN``
bytes``
``file_kind``              ``"other"``; ``operator`` ``"posix"``
``n_workers``              the job's process count
others                     null
=========================  ============================================================

Standard streams (``<STDIN>``, ``<STDOUT>``, ``<STDERR>``) are not files and are left out.
Darshan marks a counter it could not keep with -1; such rows fail the row checks
(negative count) and are counted as issues.

Isolation: the darshan C parser can abort the whole process on a damaged log (a
truncated file frees an invalid pointer). Each log is therefore parsed in a spawned
child process (about a second of start-up per log); a log that kills it is counted as
an issue. The child's standard error (the C library's messages, such as "Error: unable to
read compressed data from file." or "double free or corruption") goes to a temporary
file, not to the user's terminal; the first of those messages is quoted in the issue,
"damaged or truncated Darshan log: ...".

Damage inside the POSIX data does not always stop the parser: it can inflate garbage,
print "Error: failed to read module POSIX data from darshan log file." and hand back the
records decoded until then, as if the module had ended. Such records are not trusted: the
log is skipped and counted as unreadable, quoting the parser's first message. The parser's
standard error is therefore captured in both modes; with ``isolate=False`` this process's
file descriptor 2 points at the temporary file while the parser runs.

A log cut after its POSIX data (inside a later module, such as STDIO or LUSTRE) parses
without an error: its POSIX rows are whole and are read, and the cut is counted as
"damaged Darshan log (POSIX rows kept)". It is found from the log's header, which gives
each module's region (offset and length, in bytes): the file ends before the last one does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import struct
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from logs_analysis.errors import DependencyError
from logs_analysis.issues import ReadIssues
from logs_analysis.readers.base import ChunkResult
from placement.schema import SCHEMA, conform

__all__ = ["DarshanChunk", "plan_darshan", "read_darshan", "require_darshan"]

_STREAMS = frozenset({"<STDIN>", "<STDOUT>", "<STDERR>"})


def require_darshan() -> Any:
    """Import PyPI ``darshan`` or raise :class:`DependencyError` with the fix."""
    try:
        import darshan
    except ImportError as exc:
        raise DependencyError(
            "reading Darshan logs needs the optional 'darshan' package: "
            "pip install 'dataplane[darshan]' (or pip install darshan)"
        ) from exc
    return darshan


def read_darshan(path: str | os.PathLike[str], *, isolate: bool = True) -> ChunkResult:
    """Rows of one Darshan log (see the module docstring for the mapping).

    Parameters
    ----------
    path : path
        The log.
    isolate : bool
        Parse in a child process (default), so a log that crashes the parser is only an issue.

    Raises
    ------
    DependencyError
        If ``darshan`` is not installed.
    """
    require_darshan()
    fd, err_path = tempfile.mkstemp(prefix="darshan-", suffix=".stderr")
    os.close(fd)
    try:
        if not isolate:
            with _stderr_redirected(err_path):
                return _read(str(path), err_path)
        try:
            with ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_stderr_to,
                initargs=(err_path,),
            ) as pool:
                return pool.submit(_read, str(path), err_path).result()
        except BrokenProcessPool:
            said = _first_message(err_path)
            issues = ReadIssues()
            issues.add(
                "unreadable Darshan log (skipped)",
                str(path),
                detail=f"{DAMAGED}: the darshan parser crashed on it"
                + (f" ({said})" if said else ""),
            )
            return ChunkResult(SCHEMA.empty_table(), issues, str(path))
    finally:
        try:
            os.unlink(err_path)
        except OSError:
            pass


#: Start of the detail of a log the parser cannot read.
DAMAGED = "damaged or truncated Darshan log"


#: What the parser prints when the POSIX data ends in an error, not at its end.
_POSIX_READ_FAILED = "failed to read module POSIX data"


def _stderr_to(path: str) -> None:
    """Child-process initializer: point file descriptor 2 (C and Python stderr) at ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 2)
    os.close(fd)


@contextlib.contextmanager
def _stderr_redirected(path: str) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` for the block, then put the old one back."""
    saved = os.dup(2)
    try:
        _stderr_to(path)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _messages(path: str) -> list[str]:
    """The non-blank lines of the first 4 KiB written to ``path`` (the parser's stderr)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return []
    return [line.strip() for line in head.decode("utf-8", "replace").splitlines() if line.strip()]


def _first_message(path: str) -> str:
    """The first message the parser wrote to ``path``, or ``""``."""
    return next(iter(_messages(path)), "")


def _read(path: str, err_path: str) -> ChunkResult:
    """Parse one log; ``err_path`` is where this process's stderr goes (to quote from)."""
    darshan = require_darshan()
    source = str(path)
    issues = ReadIssues()
    try:
        report = darshan.DarshanReport(source, read_all=False)
        job = report.metadata["job"]
        if "POSIX" not in report.modules:
            issues.add(
                "no POSIX module records (skipped)",
                source,
                detail=f"modules: {sorted(report.modules)}",
            )
            return ChunkResult(SCHEMA.empty_table(), issues, source)
        report.mod_read_all_records("POSIX")
        frames = report.records["POSIX"].to_df()
        names = dict(report.name_records)
        exe = str(report.metadata.get("exe") or "")
        lengths = {name: int(info["len"]) for name, info in report.modules.items()}
        if any(_POSIX_READ_FAILED in line for line in _messages(err_path)):
            issues.add(
                "unreadable Darshan log (skipped)",
                source,
                detail=f"{DAMAGED}: {_first_message(err_path)} (the POSIX data ends in "
                "an error, not at its end; the records decoded from it are not trusted)",
            )
            return ChunkResult(SCHEMA.empty_table(), issues, source)
    except DependencyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the darshan parser raises assorted types on a damaged log
        said = _first_message(err_path)
        issues.add(
            "unreadable Darshan log (skipped)",
            source,
            detail=f"{DAMAGED}: " + (f"{said} " if said else "") + f"({type(exc).__name__}: {exc})",
        )
        return ChunkResult(SCHEMA.empty_table(), issues, source)
    counters = frames["counters"]
    fcounters = frames["fcounters"]
    start = float(job.get("start_time_sec", 0)) + float(job.get("start_time_nsec", 0)) * 1e-9
    end = float(job.get("end_time_sec", 0)) + float(job.get("end_time_nsec", 0)) * 1e-9
    jobid = str(job.get("jobid", ""))
    pipeline = Path(exe.split(" ", 1)[0]).name if exe else Path(source).stem
    run_id = f"{pipeline}-{jobid}-{int(start)}"
    ids = counters["id"].to_numpy()
    ranks = counters["rank"].to_numpy()
    file_names = [names.get(int(i), "") for i in ids]
    keep = np.array([n not in _STREAMS for n in file_names], dtype=bool)

    def col(frame: Any, name: str) -> np.ndarray:
        return frame[name].to_numpy()[keep]

    opened = start + col(fcounters, "POSIX_F_OPEN_START_TIMESTAMP").astype(np.float64)
    closed_rel = col(fcounters, "POSIX_F_CLOSE_END_TIMESTAMP").astype(np.float64)
    closed = np.where(closed_rel > 0, start + closed_rel, max(end, start))
    closed = np.maximum(closed, opened)
    max_byte = np.maximum(
        col(counters, "POSIX_MAX_BYTE_READ"), col(counters, "POSIX_MAX_BYTE_WRITTEN")
    ).astype(np.int64)
    kept_names = [n for n, k in zip(file_names, keep, strict=True) if k]
    kept_ids, kept_ranks = ids[keep], ranks[keep]
    n = int(keep.sum())
    table = pa.table(
        {
            "file_id": [f"{jobid}/{r}/{i}" for r, i in zip(kept_ranks, kept_ids, strict=True)],
            "pipeline": [pipeline] * n,
            "run_id": [run_id] * n,
            "stage": [str(Path(name).parent) if name else "" for name in kept_names],
            "job_id": [jobid] * n,
            "worker": [str(r) for r in kept_ranks],
            "created_at": opened,
            "file_kind": ["other"] * n,
            "operator": ["posix"] * n,
            "n_workers": pa.array([int(job.get("nprocs", 0)) or None] * n, pa.int32()),
            "deleted_at": closed,
            "size_bytes": np.where(max_byte >= 0, max_byte + 1, 0),
            "read_ops": col(counters, "POSIX_READS").astype(np.int64),
            "write_ops": col(counters, "POSIX_WRITES").astype(np.int64),
            "read_bytes": col(counters, "POSIX_BYTES_READ").astype(np.int64),
            "write_bytes": col(counters, "POSIX_BYTES_WRITTEN").astype(np.int64),
        }
    )
    labels = [
        f"record {i} rank {r} ({name})"
        for i, r, name in zip(kept_ids, kept_ranks, kept_names, strict=True)
    ]
    missing = missing_bytes(source, lengths)
    if missing:
        issues.add(
            DAMAGED_KEPT,
            source,
            detail=f"{DAMAGED}: the file ends {missing:,} byte(s) before its module data does; "
            "the POSIX records come first and are whole",
        )
    return ChunkResult(conform(table), issues, source, labels=labels)


#: Reason of a log cut after its POSIX data: its rows are read, the cut is counted.
DAMAGED_KEPT = "damaged Darshan log (POSIX rows kept)"
#: ``DARSHAN_MAGIC_NR``, the header's int64 at byte 8 (either byte order).
_MAGIC = 6567223
#: Byte offsets in the header: the name map, then the module maps; each map is an
#: (offset, length) pair of uint64 (darshan-log-format.h, format 3.x).
_NAME_MAP_AT, _MOD_MAPS_AT, _MAX_MODS = 24, 40, 64


def missing_bytes(path: str, lengths: dict[str, int]) -> int:
    """How many bytes of module data lie past the end of the log at ``path`` (0 if none).

    Parameters
    ----------
    path : str
        A Darshan log.
    lengths : dict of str to int
        Each module's region length in bytes, as the parser reports it
        (``DarshanReport.modules[name]["len"]``).

    Returns
    -------
    int
        ``0`` when the log is whole, or when its header cannot be matched to ``lengths``
        (only a sure cut is reported). Parsed by hand with :mod:`struct`: the parser
        exposes each region's length but not its offset.
    """
    head_size = _MOD_MAPS_AT + 16 * _MAX_MODS
    try:
        with open(path, "rb") as f:
            head = f.read(head_size)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return 0
    if len(head) < _MOD_MAPS_AT:
        return 0
    for order in "<>":
        if struct.unpack_from(order + "q", head, 8)[0] == _MAGIC:
            break
    else:
        return 0
    wanted = sorted(n for n in lengths.values() if n > 0)
    maps = [
        struct.unpack_from(order + "QQ", head, at) for at in range(_MOD_MAPS_AT, len(head) - 15, 16)
    ]
    # the module maps are the first len(wanted) non-empty pairs, in module order
    regions = [(off, n) for off, n in maps if n > 0][: len(wanted)]
    if sorted(n for _, n in regions) != wanted:
        return 0
    name_off, name_len = struct.unpack_from(order + "QQ", head, _NAME_MAP_AT)
    end = max([name_off + name_len] + [off + n for off, n in regions])
    return max(0, end - size)


@dataclasses.dataclass(frozen=True)
class DarshanChunk:
    """One Darshan log file."""

    source: str
    estimated_rows: int

    def load(self) -> ChunkResult:
        return read_darshan(self.source)


def plan_darshan(path: str | os.PathLike[str]) -> tuple[list[DarshanChunk], ReadIssues]:
    """One chunk per log (rows estimated at one per 400 bytes of compressed log)."""
    require_darshan()
    size = Path(path).stat().st_size
    return [DarshanChunk(str(path), max(1, math.ceil(size / 400)))], ReadIssues()
