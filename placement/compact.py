"""Compaction of a log directory: many small log files merged into few large ones.

Workers write one small Parquet file per flush (:class:`placement.logwriter.LogWriter`);
over weeks a log directory holds many thousands, and every reader of the directory (the
scheduler's stage history, ``dataplane placement train``, ``dataplane report``) pays per
file. :func:`compact` merges the complete log files of one directory (not its
subdirectories) into files of about ``target_rows`` rows, while workers keep writing to it
and readers keep reading it.

What is merged
--------------
Only complete files: the non-hidden ``*.parquet`` files of the directory when compaction
starts (a file being written has a hidden ``.tmp`` name until it is complete), whose
columns are exactly those of :data:`placement.schema.SCHEMA` at the current
:data:`~placement.schema.SCHEMA_VERSION`, taken in name order. A file of another schema
version or other columns, or one that cannot be read, is left alone and reported
(:attr:`CompactResult.skipped`); it is never deleted. A merged file already of
``target_rows`` rows or more is left as it is; smaller ones are merged again. A merged file
holds consecutive files only: one left alone ends a run, so the directory's rows keep the
name order of their files. The hidden records of unlogged files (``.unlogged-*.json``) are
left as they are.

How a merge happens, and what a crash leaves
--------------------------------------------
For each group of files, in order:

1. their rows are read and written, in name order, to a hidden temporary file
   (``.<name>.tmp``) whose Parquet metadata lists the files it holds
   (:data:`~placement.compacted.COMPACTED_FROM_KEY`: name, first row, rows, size in
   bytes); the file is synced (``fsync``) and its row count checked against the parts';
2. it is renamed to ``<first part>.<token>.compacted.parquet`` and the directory synced;
3. the parts are deleted, and the directory synced.

A failure in step 1 (a full disk: ``ENOSPC``) removes the temporary file and keeps every
part: nothing is lost, and :class:`CompactError` names the directory and the fix. A crash
between steps 2 and 3 leaves the merged file and (some of) its parts: readers skip a part
that a merged file of the same directory lists (the reader-side rule,
:func:`placement.compacted.skip_compacted`), so no row is read twice, and the next
compaction deletes those leftovers first. A reader that listed a part before it was
deleted reads its rows from the merged file (:func:`placement.compacted.read_covered`).

Two compactions of one directory do not run at once: each holds an exclusive lock on
the hidden file ``.compact.lock`` in the directory (:class:`CompactError` if another holds it).

Example
-------
>>> result = compact("logs/", target_rows=1_000_000)  # doctest: +SKIP
>>> result.files_before, result.files_after  # doctest: +SKIP
(5000, 1)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from placement.compacted import (
    COMPACTED_FROM_KEY,
    COMPACTED_SUFFIX,
    CompactedPart,
    compacted_parts,
)
from placement.errors import PlacementConfigError, PlacementError
from placement.logwriter import LOG_SUFFIX, sync_path
from placement.schema import SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY

__all__ = ["DEFAULT_TARGET_ROWS", "LOCK_NAME", "CompactError", "CompactResult", "compact"]

#: Rows of a merged file, by default (about 50 MB of rows in memory while it is written).
DEFAULT_TARGET_ROWS = 1_000_000
#: Hidden lock file of a directory being compacted.
LOCK_NAME = ".compact.lock"
#: Rows per Parquet row group of a merged file (readers split their work by row groups).
ROW_GROUP_ROWS = 131_072


class CompactError(PlacementError):
    """A log directory cannot be compacted; the message names it and the fix. Nothing
    is lost: the files not yet merged are kept."""


@dataclass
class Merge:
    """One merged file: made (or, on a dry run, to be made) from ``sources``."""

    path: Path
    sources: list[Path]
    rows: int
    bytes_before: int
    bytes_after: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "sources": len(self.sources),
            "rows": self.rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }


@dataclass
class CompactResult:
    """What a compaction did (or, with ``dry_run``, would do) to one directory.

    Attributes
    ----------
    directory : Path
    dry_run : bool
    files_before, files_after : int
        Log files (``*.parquet``) the directory held when compaction started, and after
        (files written meanwhile by workers not counted).
    rows : int
        Rows in the files merged (the same before and after).
    bytes_before, bytes_after : int
        Bytes of the files merged, and of the files made from them.
    merges : list of Merge
    leftovers_removed : list of Path
        Files an earlier, interrupted compaction had merged but not deleted.
    skipped : list of (Path, str)
        Files left alone, and why (another schema version, unreadable).
    """

    directory: Path
    dry_run: bool
    files_before: int = 0
    files_after: int = 0
    rows: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    merges: list[Merge] = field(default_factory=list)
    leftovers_removed: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values."""
        return {
            "directory": str(self.directory),
            "dry_run": self.dry_run,
            "files_before": self.files_before,
            "files_after": self.files_after,
            "files_merged": sum(len(m.sources) for m in self.merges),
            "rows": self.rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "merges": [m.to_json_dict() for m in self.merges],
            "leftovers_removed": [str(p) for p in self.leftovers_removed],
            "skipped": [{"path": str(p), "reason": r} for p, r in self.skipped],
        }

    def text(self) -> str:
        """A few lines for a terminal."""
        verb = "would merge" if self.dry_run else "merged"
        merged = sum(len(m.sources) for m in self.merges)
        lines = [
            f"{self.directory}: {self.files_before} log files before, {self.files_after} after"
            + (" (dry run: nothing changed)" if self.dry_run else ""),
            f"{verb} {merged} files ({self.rows:,} rows, {_size(self.bytes_before)}) into "
            f"{len(self.merges)} file(s)"
            + ("" if self.dry_run else f" ({_size(self.bytes_after)})"),
        ]
        if self.leftovers_removed:
            verb = "would remove" if self.dry_run else "removed"
            lines.append(
                f"{verb} {len(self.leftovers_removed)} file(s) an interrupted compaction "
                "had merged already"
            )
        for path, reason in self.skipped:
            lines.append(f"left alone: {path}: {reason}")
        return "\n".join(lines)


def _size(n: int) -> str:
    """``n`` bytes in words."""
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def compact(
    directory: str | os.PathLike[str],
    *,
    target_rows: int = DEFAULT_TARGET_ROWS,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CompactResult:
    """Merge the small complete log files of ``directory`` (see the module docstring).

    Parameters
    ----------
    directory : path
        A log directory; its subdirectories are left alone.
    target_rows : int
        Most rows of a merged file; a group closes before the file that would pass it
        (a file of more rows alone is left as it is).
    dry_run : bool
        Only say what would be done: nothing is written or deleted.
    progress : callable, optional
        Called as ``progress(files_done, files_to_merge)`` before the first merge and
        after each.

    Returns
    -------
    CompactResult

    Raises
    ------
    PlacementConfigError
        If ``target_rows`` is not an int of at least 2.
    CompactError
        If ``directory`` is missing, not a directory or not writable, another compaction
        holds it, or a merged file cannot be written (a full disk); files not merged
        by then are kept.
    """
    if isinstance(target_rows, bool) or not isinstance(target_rows, int) or target_rows < 2:
        raise PlacementConfigError(f"target_rows={target_rows!r} must be an int >= 2")
    d = Path(directory)
    if not d.exists():
        raise CompactError(f"log directory {d} does not exist; check the path")
    if not d.is_dir():
        raise CompactError(f"{d} is not a directory; give the directory of the log files")
    if not dry_run and not os.access(d, os.W_OK | os.X_OK):
        raise CompactError(
            f"log directory {d} is not writable: compaction writes merged files there and "
            "deletes the merged ones; run as the owner of the logs or fix its permissions "
            "(or try --dry-run)"
        )
    result = CompactResult(directory=d, dry_run=dry_run)
    with _locked(d, dry_run):
        names = _log_names(d)
        result.files_before = len(names)
        leftovers = _leftovers(d, names)
        if leftovers and not dry_run:
            _sync_directory(d)  # the merged files holding them are durable first
        for name in sorted(leftovers):
            if not dry_run:
                _remove(d / name)
            result.leftovers_removed.append(d / name)
        if leftovers and not dry_run:
            with contextlib.suppress(OSError):
                sync_path(d)
        names = [n for n in names if n not in leftovers]
        groups = _groups(d, names, target_rows, result.skipped)
        done, total = 0, sum(len(g) for g in groups)
        if progress is not None:
            progress(0, total)
        for group in groups:
            merge = _plan_merge(d, group)
            if not dry_run:
                _merge(d, merge)
            result.merges.append(merge)
            result.rows += merge.rows
            result.bytes_before += merge.bytes_before
            result.bytes_after += merge.bytes_after
            done += len(group)
            if progress is not None:
                progress(done, total)
        merged = sum(len(m.sources) for m in result.merges)
        result.files_after = len(names) - merged + len(result.merges)
    return result


@contextlib.contextmanager
def _locked(directory: Path, dry_run: bool) -> Iterator[None]:
    """Hold the directory's compaction lock (none on a dry run, which changes nothing)."""
    if dry_run:
        yield
        return
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CompactError(
            f"cannot create the lock file {path}: {exc.strerror or exc}; check the "
            "directory's permissions and free space"
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise CompactError(
                f"another compaction of {directory} is running (it holds {path}); "
                "wait for it to end"
            ) from exc
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race)


def _log_names(directory: Path) -> list[str]:
    """Names of the complete log files of ``directory``, sorted."""
    with os.scandir(directory) as entries:
        return sorted(
            e.name
            for e in entries
            if e.name.endswith(LOG_SUFFIX) and not e.name.startswith(".") and e.is_file()
        )


def _leftovers(directory: Path, names: list[str]) -> set[str]:
    """Names among ``names`` that a merged file among them holds already (of its size)."""
    found: set[str] = set()
    listed = set(names)
    for merged in (n for n in names if n.endswith(COMPACTED_SUFFIX)):
        try:
            parts = compacted_parts(directory / merged)
        except (OSError, pa.ArrowException, ValueError):
            continue  # read as any log file: reported by _groups if unreadable
        for name, part in parts.items():
            if name in listed and name != merged and _size_of(directory / name) == part.size_bytes:
                found.add(name)
    return found


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


@dataclass
class _Candidate:
    name: str
    rows: int
    size_bytes: int


def _groups(
    directory: Path, names: list[str], target_rows: int, skipped: list[tuple[Path, str]]
) -> list[list[_Candidate]]:
    """Runs of consecutive usable files of at most ``target_rows`` rows, two files or more."""
    groups: list[list[_Candidate]] = []
    current: list[_Candidate] = []
    rows = 0

    def close() -> None:
        nonlocal current, rows
        if len(current) >= 2:
            groups.append(current)
        current, rows = [], 0

    for name in names:
        path = directory / name
        why = _unusable(path)
        if why is not None:
            skipped.append((path, why))
            close()  # a run of files merged is consecutive: no merged file spans this one
            continue
        meta = pq.read_metadata(path)
        candidate = _Candidate(name, meta.num_rows, path.stat().st_size)
        if candidate.rows >= target_rows:  # full already: left as it is, and ends the run
            close()
            continue
        if rows + candidate.rows > target_rows:
            close()
        current.append(candidate)
        rows += candidate.rows
    close()
    return groups


def _unusable(path: Path) -> str | None:
    """Why log file ``path`` cannot be merged, or ``None`` if it can."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        return f"unreadable ({exc}); left alone: check or remove it by hand"
    version = (schema.metadata or {}).get(SCHEMA_VERSION_KEY)
    if version != str(SCHEMA_VERSION).encode():
        shown = version.decode(errors="replace") if version is not None else "none"
        return (
            f"log schema version {shown}, not {SCHEMA_VERSION}; left alone (it is read as it "
            "is; rewrite it with this version to merge it)"
        )
    if not schema.equals(SCHEMA, check_metadata=False):
        return "columns differ from the log schema; left alone"
    return None


def _base_name(name: str) -> str:
    """``name`` without its ``.<token>.compacted.parquet`` or ``.parquet`` suffix."""
    if name.endswith(COMPACTED_SUFFIX):
        stem = name[: -len(COMPACTED_SUFFIX)]
        return stem.rsplit(".", 1)[0] if "." in stem else stem
    return name[: -len(LOG_SUFFIX)]


def _plan_merge(directory: Path, group: list[_Candidate]) -> Merge:
    """The merged file of ``group``: named after its first file, so that it sorts where the
    group did (``.<token>`` keeps the name new)."""
    name = f"{_base_name(group[0].name)}.{uuid.uuid4().hex[:8]}{COMPACTED_SUFFIX}"
    return Merge(
        path=directory / name,
        sources=[directory / c.name for c in group],
        rows=sum(c.rows for c in group),
        bytes_before=sum(c.size_bytes for c in group),
    )


def _parts(directory: Path, merge: Merge) -> tuple[list[pa.Table], list[CompactedPart]]:
    """The tables of ``merge``'s sources and the parts list of the merged file: each source,
    and the parts a merged source held, at their rows in the new file."""
    tables: list[pa.Table] = []
    parts: list[CompactedPart] = []
    first = 0
    for source in merge.sources:
        table = pq.read_table(source)
        if not table.schema.equals(SCHEMA, check_metadata=False):
            raise CompactError(f"{source} changed while it was merged; run compaction again")
        size = source.stat().st_size
        parts.append(CompactedPart(source.name, first, table.num_rows, size))
        if source.name.endswith(COMPACTED_SUFFIX):
            for inner in compacted_parts(source).values():
                parts.append(
                    CompactedPart(inner.name, first + inner.first_row, inner.rows, inner.size_bytes)
                )
        tables.append(table.replace_schema_metadata(None))
        first += table.num_rows
    return tables, parts


def _merge(directory: Path, merge: Merge) -> None:
    """Write, sync, check and rename the merged file, then delete its sources.

    Raises
    ------
    CompactError
        If the sources cannot be read or the merged file cannot be written; the temporary
        file is removed and the sources kept.
    """
    tmp = directory / f".{merge.path.name}.tmp"
    try:
        tables, parts = _parts(directory, merge)
        table = pa.concat_tables(tables)
        metadata = dict(SCHEMA.metadata or {})
        metadata[COMPACTED_FROM_KEY] = json.dumps([p.to_json() for p in parts]).encode()
        table = table.replace_schema_metadata(metadata)
        _write_table(table, tmp)
        sync_path(tmp)
        written = pq.read_metadata(tmp).num_rows
        if written != merge.rows:
            raise CompactError(
                f"{tmp} holds {written} rows, not the {merge.rows} of its parts; nothing was "
                "deleted: run compaction again"
            )
        merge.bytes_after = tmp.stat().st_size
        os.replace(tmp, merge.path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, CompactError):
            raise
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CompactError(
                f"the disk of {directory} is full: writing the merged file {merge.path.name} "
                f"({merge.bytes_before} bytes of parts) failed; nothing was lost (its parts "
                "are kept, the temporary file removed): free space, or give a smaller "
                "--target-rows, and run compaction again"
            ) from exc
        if isinstance(exc, (OSError, pa.ArrowException)):
            raise CompactError(
                f"merging {len(merge.sources)} log files of {directory} into "
                f"{merge.path.name} failed ({exc}); nothing was lost (the files are kept): "
                "fix the cause and run compaction again"
            ) from exc
        raise
    _sync_directory(directory)  # the merged file is durable before any part goes
    for source in merge.sources:
        _remove(source)
    with contextlib.suppress(OSError):  # the deletes: a lost one is a leftover, skipped
        sync_path(directory)


def _write_table(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)


def _remove(path: Path) -> None:
    """Delete a part already merged; one gone already is fine.

    Raises
    ------
    CompactError
        If it cannot be deleted (its rows are read once all the same: readers skip it,
        and the next compaction deletes it).
    """
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CompactError(
            f"cannot delete {path}, merged already ({exc.strerror or exc}); readers skip it, "
            "and the next compaction deletes it: fix the permissions and run it again"
        ) from exc


def _sync_directory(directory: Path) -> None:
    """Sync the entries of ``directory`` (the renames into it) before files it names merged
    are deleted: a power loss must not keep the deletes and lose the rename.

    Raises
    ------
    CompactError
        If it cannot be synced; no part has been deleted then (readers skip those a merged
        file holds).
    """
    try:
        sync_path(directory)
    except OSError as exc:
        raise CompactError(
            f"cannot sync the log directory {directory} ({exc.strerror or exc}), so merged "
            "files are not deleted (readers skip them: nothing is read twice); compact logs "
            "on a file system that syncs directories"
        ) from exc
