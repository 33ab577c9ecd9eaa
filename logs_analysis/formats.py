"""Input formats and their detection by content.

:func:`discover` turns the paths a user gives into :class:`Source` s, each a file (or a
Spark rolling event-log directory) with its format. Formats are recognised by content,
not by name:

=====================  ============================================================
format / container     recognised by
=====================  ============================================================
native / parquet       Parquet magic ``PAR1`` (placement log rows)
native / jsonl         JSON lines whose first object has placement-log keys
                       (``file_id``, ``created_at``...)
spark / eventlog       JSON lines whose first object is ``{"Event": "SparkListener...``,
                       plain or compressed (zstd, lz4, snappy, gzip; see
                       :mod:`logs_analysis.readers.compression`)
spark / eventlog-dir   a directory named ``eventlog_v2_*`` (rolling event log)
darshan / darshan      Darshan log header (version string, magic number 6567223)
=====================  ============================================================

Directories are walked recursively in name order; hidden names (``.x``, ``_SUCCESS``)
are skipped, and a file whose format cannot be told is skipped and counted in the
returned :class:`~logs_analysis.issues.ReadIssues` (so a ``README.md`` beside event
logs does no harm). So are a dangling link, FIFO or socket inside a directory ("not a
regular file (skipped)"), a subdirectory that cannot be listed ("unreadable directory
(skipped)", with the reason), a file whose codec is not supported or whose stream is
damaged ("unsupported or damaged file (skipped)", with what is wrong and the fix), one that
cannot be read ("unreadable file") and a file or directory reached a second time, by its
resolved path, e.g. named and also inside a directory named ("duplicate path (read
once)"). Known companion files that are not logs, such as the ``summary.json`` that
``dataplane placement collect`` writes beside its log (:data:`COMPANION_FILES`), are
left out without a word when their content is not a log. A path named explicitly must
be recognised, unless ``--format`` forces a format, in which case every file is read as
that format.

A directory listing is no snapshot: one made while ``dataplane placement compact`` renames
a merged log file (``*.compacted.parquet``) in and deletes the files it holds may see
neither. So the merged log files of every directory walked are listed again once the walk
is done, and those it missed are added as native Parquet sources (not for ``--format
spark|darshan``); the files a merged file holds are then left out by
:func:`logs_analysis.readers.plan` (:mod:`placement.compacted`). A file named explicitly
adds no merged file beside it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import struct
from pathlib import Path

from logs_analysis.errors import FormatError, InputError, TruncatedStreamError
from logs_analysis.issues import ReadIssues
from placement.compacted import merged_names

__all__ = [
    "COMPANION_FILES",
    "DARSHAN_MAGIC",
    "Container",
    "LogFormat",
    "Source",
    "discover",
    "resolved_path",
    "sniff",
]

#: Reason counted for a file inside a directory whose content is of a known kind but cannot
#: be read (a codec not supported, a damaged stream); the example names the file and the fix.
UNSUPPORTED_FILE = "unsupported or damaged file (skipped)"
#: ``DARSHAN_MAGIC_NR`` of darshan-log-format.h, stored after the 8-byte version string.
DARSHAN_MAGIC = 6567223
PARQUET_MAGIC = b"PAR1"
_HEAD_BYTES = 1 << 16
_SPARK_RE = re.compile(rb'^\s*\{\s*"Event"\s*:\s*"(SparkListener|org\.apache\.spark)')
_NATIVE_KEYS = frozenset({"file_id", "created_at", "deleted_at", "size_bytes", "run_id"})
ROLLING_DIR_PREFIX = "eventlog_v2_"
#: Names of files written beside logs that are not logs themselves, left out of a directory
#: walk when their content is no log: ``summary.json`` is ``placement.collect.SUMMARY_FILE``.
COMPANION_FILES = frozenset({"summary.json"})


class LogFormat(str, enum.Enum):
    """Which reader reads an input (``auto``: detect from content)."""

    AUTO = "auto"
    NATIVE = "native"
    SPARK = "spark"
    DARSHAN = "darshan"

    def __str__(self) -> str:
        return self.value


class Container(str, enum.Enum):
    """How a source's records are stored."""

    PARQUET = "parquet"
    JSONL = "jsonl"
    EVENTLOG = "eventlog"
    EVENTLOG_DIR = "eventlog-dir"
    DARSHAN = "darshan"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Source:
    """One input to read: a file, or a Spark rolling event-log directory."""

    path: Path
    format: LogFormat
    container: Container

    def __str__(self) -> str:
        return f"{self.path} ({self.format.value}/{self.container.value})"


def _json_kind(head: bytes) -> Container | None:
    """EVENTLOG or JSONL from the first JSON line(s) of ``head``, else None."""
    if _SPARK_RE.match(head.lstrip(b"\xef\xbb\xbf")):
        return Container.EVENTLOG
    for line in head.split(b"\n")[:20]:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            if "Event" in obj:
                return Container.EVENTLOG
            if _NATIVE_KEYS & obj.keys():
                return Container.JSONL
        return None
    return None


def sniff(path: str | os.PathLike[str]) -> tuple[LogFormat, Container] | None:
    """Format of one file from its content, or ``None`` if it is none of the known ones.

    Raises
    ------
    InputError
        If the file cannot be read.
    FormatError
        If it is compressed with a codec that cannot be read (e.g. LZF) or is corrupt. A
        compressed file cut short is judged by the bytes decoded before the cut.
    """
    from logs_analysis.readers.compression import Codec, open_decompressed, sniff_codec

    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions"
        ) from exc
    if head.startswith(PARQUET_MAGIC):
        return LogFormat.NATIVE, Container.PARQUET
    if (
        len(head) >= 16
        and head[:1].isdigit()
        and b"." in head[:8]
        and DARSHAN_MAGIC
        in (struct.unpack("<q", head[8:16])[0], struct.unpack(">q", head[8:16])[0])
    ):
        return LogFormat.DARSHAN, Container.DARSHAN
    codec = sniff_codec(head, path)
    if codec is not Codec.NONE:
        _, chunks = open_decompressed(path)
        text = b""
        try:
            for chunk in chunks:
                text += chunk
                if len(text) >= _HEAD_BYTES:
                    break
        except TruncatedStreamError:
            # cut short (e.g. an in-progress log): judge by what decoded before the cut; if
            # nothing did, it can only be an event log (the one compressed format), whose
            # reader counts the truncation
            if not text.strip():
                return LogFormat.SPARK, Container.EVENTLOG
        kind = _json_kind(text)
        return (LogFormat.SPARK, Container.EVENTLOG) if kind is Container.EVENTLOG else None
    kind = _json_kind(head)
    if kind is Container.EVENTLOG:
        return LogFormat.SPARK, Container.EVENTLOG
    if kind is Container.JSONL:
        return LogFormat.NATIVE, Container.JSONL
    return None


def _forced_container(path: Path, fmt: LogFormat) -> Container:
    if fmt is LogFormat.SPARK:
        return Container.EVENTLOG_DIR if path.is_dir() else Container.EVENTLOG
    if fmt is LogFormat.DARSHAN:
        return Container.DARSHAN
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return Container.PARQUET if magic == PARQUET_MAGIC else Container.JSONL


def _special_kind(path: Path) -> str:
    """What a path that is neither a regular file nor a directory is, in words."""
    import stat

    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return f"cannot stat it: {exc.strerror or exc}"
    if stat.S_ISLNK(mode):
        return f"a link to {os.readlink(path)!r}, which leads nowhere (missing or a loop)"
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def resolved_path(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved, or made absolute where it cannot be (e.g. a link loop)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute()


def _hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith((".crc", ".tmp"))


def _missed_merged_files(directories: list[Path], seen: dict[Path, Path]) -> list[Source]:
    """The merged log files in ``directories`` now that their walk did not reach.

    A listing made while a compaction renames a merged file in and deletes its parts may
    see neither (:mod:`placement.compacted`); each directory's merged files are listed
    again here (:func:`placement.compacted.merged_names`).

    Parameters
    ----------
    directories : list of Path
        The directories walked.
    seen : dict
        Resolved path -> path, of every file and directory reached: a merged file reached
        (named, or listed) is not added again.

    Returns
    -------
    list of Source
        Native Parquet sources, by directory then name.
    """
    missed: list[Source] = []
    for directory in directories:
        for name in sorted(merged_names(directory)):
            path = directory / name
            if not _hidden(name) and resolved_path(path) not in seen:
                missed.append(Source(path, LogFormat.NATIVE, Container.PARQUET))
    return missed


def discover(
    paths: list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...],
    fmt: LogFormat | str = LogFormat.AUTO,
) -> tuple[list[Source], ReadIssues]:
    """Sources under ``paths`` and the files skipped on the way.

    Parameters
    ----------
    paths : list of path
        Files and directories.
    fmt : LogFormat or str
        ``auto`` to detect each file's format, or a format to read every file as.

    Returns
    -------
    (list of Source, ReadIssues)
        The sources in the order reached, then the merged log files the walk of a directory
        missed (a listing made during a compaction; see the module docstring).

    Raises
    ------
    InputError
        If a path does not exist, is an empty file or a directory that cannot be listed, or
        nothing readable was found.
    FormatError
        If ``fmt`` is unknown, or a file named explicitly is of no known format.
    """
    try:
        fmt = LogFormat(fmt)
    except ValueError:
        raise FormatError(
            f"--format {fmt!r} is not one of {[f.value for f in LogFormat]}"
        ) from None
    if not paths:
        raise InputError("no log paths given; name at least one file or directory")
    sources: list[Source] = []
    issues = ReadIssues()
    # resolved path -> the path it was first visited as (files, rolling and walked directories)
    seen: dict[Path, Path] = {}
    walked: list[Path] = []  # directories listed, in the order walked
    rolling: set[Path] = set()  # resolved rolling event-log directories (read whole)
    first_error: dict[str, str] = {}  # reason -> the whole message of its first file

    def visit(path: Path, explicit: bool) -> None:
        # a link loop resolves to its absolute path: is_file() is False, counted below
        resolved = resolved_path(path)
        first = seen.get(resolved) or next(
            (seen[p] for p in resolved.parents if p in rolling), None
        )
        if first is not None:
            # the same file or directory reached twice (named twice, named and inside a
            # directory also named, or through a link): read once
            issues.add("duplicate path (read once)", str(path), detail=f"already read as {first}")
            return
        if path.is_dir():
            seen[resolved] = path
            if path.name.startswith(ROLLING_DIR_PREFIX) and fmt in (
                LogFormat.AUTO,
                LogFormat.SPARK,
            ):
                rolling.add(resolved)
                sources.append(Source(path, LogFormat.SPARK, Container.EVENTLOG_DIR))
                return
            try:
                children = sorted(path.iterdir())
            except OSError as exc:
                why = exc.strerror or str(exc)
                if explicit:
                    raise InputError(
                        f"cannot list the directory {path}: {why}; check its permissions"
                    ) from exc
                # its files cannot even be named: skipped, but counted with the reason
                issues.add(
                    "unreadable directory (skipped)",
                    str(path),
                    detail=f"cannot list it: {why}; check its permissions",
                )
                return
            walked.append(path)
            for child in children:
                if not _hidden(child.name):
                    visit(child, False)
            return
        if not path.is_file():
            if explicit:
                raise InputError(f"{path} is not a regular file or directory")
            # a dangling link, FIFO, socket or device: skipped, but counted
            issues.add("not a regular file (skipped)", str(path), detail=_special_kind(path))
            return
        seen[resolved] = path
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if size == 0:
            if explicit:
                raise InputError(f"{path} is empty; give a log file with records in it")
            issues.add("empty file", str(path))
            return
        if fmt is not LogFormat.AUTO:
            sources.append(Source(path, fmt, _forced_container(path, fmt)))
            return
        try:
            found = sniff(path)
        except (FormatError, InputError) as exc:
            if explicit:
                raise
            reason = UNSUPPORTED_FILE if isinstance(exc, FormatError) else "unreadable file"
            issues.add(reason, str(path), detail=str(exc))
            first_error.setdefault(reason, str(exc))
            return
        if found is None:
            if not explicit and path.name in COMPANION_FILES:
                return  # e.g. the collector's summary.json: not a log, nothing amiss
            if explicit:
                raise FormatError(
                    f"cannot tell the format of {path}: it is not a placement log (Parquet or "
                    "JSON lines), a Spark event log or a Darshan log; pass "
                    "--format native|spark|darshan to read it as one"
                )
            issues.add("unrecognised format (skipped)", str(path))
            return
        sources.append(Source(path, *found))

    for p in paths:
        path = Path(p)
        if not path.exists():
            raise InputError(f"log path {path} does not exist; check the path")
        visit(path, True)
    if fmt in (LogFormat.AUTO, LogFormat.NATIVE):
        sources.extend(_missed_merged_files(walked, seen))
    if not sources:
        skipped = f" ({issues.total} file(s) skipped: {', '.join(issues.counts)})" if issues else ""
        # what is wrong with the first file that could not be read (of each reason) says
        # more than the reason alone
        why = "".join(f"; {message}" for message in first_error.values())
        raise InputError(
            f"no log files found under {', '.join(map(str, paths))}{skipped}{why}; give "
            "placement logs (.parquet/.jsonl), Spark event logs or Darshan logs"
        )
    return sources, issues
