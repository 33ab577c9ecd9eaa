"""Writing and reading placement I/O logs (Parquet files with :data:`placement.schema.SCHEMA`).

A :class:`LogWriter` buffers rows in memory and writes them as one Parquet file per
flush, named ``<prefix>-<sequence>.parquet``. Every writer has its own prefix (host,
process id and a random token), so writers of different worker processes sharing one
log directory never write the same file. A file is written under a temporary name
(``.<name>.tmp``), synced to its disk (``fsync``), renamed when complete, and the rename
synced too (the directory's ``fsync``): a crash or a power loss loses at most the rows not
yet flushed and never leaves an empty or torn Parquet file under a ``.parquet`` name.

Flushes happen when ``max_rows`` rows are buffered, when a row arrives ``max_interval_s``
seconds after the last flush, on :meth:`LogWriter.maybe_flush` (called periodically by
the worker plugin) and on :meth:`LogWriter.close`. A flush that :meth:`LogWriter.add`
finds due runs on the caller's thread (:attr:`FlushMode.INLINE`, the default) or on the
writer's own flusher thread (:attr:`FlushMode.BACKGROUND`, what a Dask worker's writer
uses: rows are added by whichever thread deletes a file, sometimes the worker's event loop,
which renews leases and sends heartbeats and must not wait for a disk's ``fsync``). A flush
that fails keeps its rows buffered for the next attempt. A row that does not fit the schema
is dropped alone (and counted in :attr:`LogWriter.rows_dropped`); the other rows of its
flush are written.

While flushes fail (a full or failing log disk), a full buffer no longer makes every new row
retry: retries wait ``max_interval_s`` seconds (periodic flushes too), the first
failure is logged with its traceback and later ones as one line at most once a minute, and
the buffer is bounded by ``max_buffered_rows``: past it the oldest rows are discarded and
counted in :attr:`LogWriter.rows_lost`, so a worker's memory does not grow without bound
while its log disk is full.

What a dead worker loses
------------------------
A Dask worker flushes its buffered rows every ``flush_interval_s`` seconds (5 by default,
:class:`~placement.storage.worker.StorageOptions`) when it has any: a flush of a few dozen
rows writes one file of about 7 KiB (2000 rows: about 40 KiB; its time is measured by
``benchmarks/log_flush.py``), and a worker writes at most 12 files a minute besides those
of ``max_rows`` rows; an idle one writes none. A worker process told to stop by SIGTERM
(its nanny past ``distributed.worker.memory.terminate``, a supervisor, ``kill``) or SIGINT
writes its buffered rows, and those of its live files, before it ends
(:mod:`placement.storage.shutdown`). SIGKILL cannot be caught: a worker killed by it
loses the rows of the files deleted during its last ``flush_interval_s`` seconds, and its
files still alive never get a row; the next store started on the same tier directories
removes those files, counts them and records the count beside the logs
(:meth:`LogWriter.record_unlogged`, read back in :attr:`LogSet.unlogged`).

Compacted directories
---------------------
``dataplane placement compact`` (:mod:`placement.compact`) merges a directory's small
files into ``*.compacted.parquet`` files whose metadata lists the files they hold
(:mod:`placement.compacted`). Readers skip a file that a merged file of its directory holds
(:func:`~placement.compacted.skip_compacted`, applied by :func:`log_files`), and read a file
listed, then merged and deleted before its read, from the merged file
(:func:`~placement.compacted.read_covered`): each row is read
once while a compaction runs or after one stopped between its rename and its deletes.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from placement.compacted import read_covered, skip_compacted
from placement.errors import PlacementConfigError, PlacementError, SchemaError
from placement.schema import SCHEMA, conform

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".parquet"
#: Name prefix of the hidden directory a collection writes its runs' logs to while it runs
#: (kept, with the finished runs' logs, when it is interrupted: :func:`placement.collect.collect`)
PARTS_PREFIX = ".parts-"
#: Name prefix and suffix of the hidden JSON records of temporary files that went without a
#: log row (:meth:`LogWriter.record_unlogged`); log readers skip them as they skip every
#: hidden name, :func:`read_logs` collects them in :attr:`LogSet.unlogged`.
UNLOGGED_PREFIX = ".unlogged-"
UNLOGGED_SUFFIX = ".json"


class LogWriteError(PlacementError, OSError):
    """A log file could not be written; the rows stay buffered."""


class FlushMode(str, Enum):
    """Which thread writes a flush that :meth:`LogWriter.add` finds due."""

    #: The thread that added the row: it waits for the file to be written and synced, so a
    #: writer fed faster than its disk holds its callers back (scripts, the collector).
    INLINE = "inline"
    #: The writer's own flusher thread, started at the first such flush: ``add`` only
    #: buffers the row and wakes it (for callers that must not wait for a disk, such as an
    #: event loop). A writer fed faster than its disk buffers up to ``max_buffered_rows``
    #: rows, then discards the oldest (counted in :attr:`LogWriter.rows_lost`).
    BACKGROUND = "background"


class LogWriter:
    """Buffers log rows and writes them to Parquet files in ``directory``.

    Parameters
    ----------
    directory : str or Path
        Where log files go (created if missing); may be shared by many writers.
    prefix : str, optional
        File-name prefix; default ``<host>-<pid>-<token>``, unique per writer.
    max_rows : int, optional
        Flush when this many rows are buffered (default 2000).
    max_interval_s : float, optional
        Flush when a row arrives this many seconds after the last flush (default 30).
    max_buffered_rows : int, optional
        Most rows kept while flushes fail (default ``50 * max_rows``, about 50 MB of rows
        at the default ``max_rows``); past it the oldest are discarded and counted in
        :attr:`rows_lost`.
    clock : callable, optional
        Monotonic clock in seconds, for the interval.
    flush_mode : FlushMode or str, optional
        Which thread writes a flush that :meth:`add` finds due (default ``inline``: the
        caller's). :meth:`flush`, :meth:`maybe_flush` and :meth:`close` always write on
        the calling thread.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        prefix: str | None = None,
        max_rows: int = 2000,
        max_interval_s: float = 30.0,
        max_buffered_rows: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        flush_mode: FlushMode | str = FlushMode.INLINE,
    ) -> None:
        try:
            self.flush_mode = FlushMode(flush_mode)
        except ValueError:
            raise PlacementConfigError(
                f"flush_mode={flush_mode!r} is not one of {[m.value for m in FlushMode]}"
            ) from None
        if not isinstance(max_rows, int) or max_rows < 1:
            raise PlacementConfigError(f"max_rows={max_rows!r} must be a positive int")
        if max_buffered_rows is None:
            max_buffered_rows = 50 * max_rows if isinstance(max_rows, int) else 0
        if not isinstance(max_buffered_rows, int) or max_buffered_rows < max_rows:
            raise PlacementConfigError(
                f"max_buffered_rows={max_buffered_rows!r} must be an int >= max_rows ({max_rows})"
            )
        if not (isinstance(max_interval_s, (int, float)) and max_interval_s > 0):
            raise PlacementConfigError(
                f"max_interval_s={max_interval_s!r} must be a positive number of seconds"
            )
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogWriteError(
                exc.errno, f"cannot create the log directory {self.directory}: {exc.strerror}"
            ) from exc
        if prefix is None:
            prefix = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if not prefix or "/" in prefix or prefix.startswith("."):
            raise PlacementConfigError(f"prefix={prefix!r} must be a plain file-name prefix")
        self.prefix = prefix
        self.max_rows = max_rows
        self.max_interval_s = float(max_interval_s)
        self.max_buffered_rows = max_buffered_rows
        self._clock = clock
        # bounded: appending to a full buffer drops its oldest row in O(1)
        self._rows: deque[Mapping[str, Any]] = deque(maxlen=max_buffered_rows)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._last_flush = clock()
        self._seq = 0
        self._records = 0
        self._closed = False
        self._failing = False  # the last flush failed: a full buffer waits for the interval
        self._failure_logged_at: float | None = None
        self._directory_sync_failed = False
        # FlushMode.BACKGROUND: the flusher thread, and what wakes it (a flush due, or close)
        self._flusher: threading.Thread | None = None
        self._wake = threading.Event()
        #: Rows written to files so far.
        self.rows_written = 0
        #: Rows dropped at a flush because they do not fit the log schema.
        self.rows_dropped = 0
        #: Rows discarded, oldest first, because flushes kept failing and the buffer
        #: reached ``max_buffered_rows``.
        self.rows_lost = 0
        #: Files written so far.
        self.files: list[Path] = []

    def add(self, row: Mapping[str, Any]) -> None:
        """Buffer one row (schema column -> value); flush if the buffer is due. Thread-safe.

        Raises
        ------
        LogWriteError
            If the writer is closed (or closing): the row is not taken.
        """
        with self._lock:
            if self._closed:
                raise LogWriteError(f"log writer {self.prefix} is closed")
            if len(self._rows) == self.max_buffered_rows:  # flushes keep failing: oldest go
                self.rows_lost += 1
            self._rows.append(row)  # a full deque drops its oldest row
            # after a failed flush a full buffer waits for the interval: retrying at every
            # row would rebuild the whole buffer's table per row while the disk is full
            due = (len(self._rows) >= self.max_rows and not self._failing) or (
                self._clock() - self._last_flush >= self.max_interval_s
            )
            if due and self.flush_mode is FlushMode.BACKGROUND:
                if self._flusher is None:
                    self._flusher = threading.Thread(
                        target=self._flush_when_woken,
                        name=f"placement-log-flush-{self.prefix}",
                        daemon=True,  # a process ending without close() loses its rows, as inline
                    )
                    self._flusher.start()
                self._wake.set()
                return
        if due:
            self._flush_logged()

    def _flush_when_woken(self) -> None:
        """The flusher thread (:attr:`FlushMode.BACKGROUND`): one flush per wake-up, until
        :meth:`close` wakes it to end (close then writes what is left itself)."""
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
            self._flush_logged()

    def maybe_flush(self, *, min_age_s: float | None = None) -> Path | None:
        """Flush if rows are buffered and ``min_age_s`` seconds have passed since the last
        flush; never raises.

        Parameters
        ----------
        min_age_s : float, optional
            Seconds since the last flush; default ``max_interval_s``. A caller that calls
            this periodically passes 0 to flush whatever is buffered at each call (the
            worker's flush period then bounds how long a row waits). After a failed flush
            it is at least ``max_interval_s``.

        Returns
        -------
        Path or None
            The file written, or ``None`` (nothing due, or the flush failed and was logged).
        """
        age = self.max_interval_s if min_age_s is None else min_age_s
        with self._lock:
            if self._failing:  # the log disk refused the last flush: retry at the interval
                age = max(age, self.max_interval_s)
            due = bool(self._rows) and self._clock() - self._last_flush >= age
        return self._flush_logged() if due else None

    def _flush_logged(self) -> Path | None:
        try:
            return self.flush()
        except Exception as exc:  # a log must never fail the task that adds a row
            self._log_failure(exc)
        return None

    def _log_failure(self, exc: Exception) -> None:
        """The first failure of a streak with its traceback; later ones as one line, at
        most once a minute."""
        now = self._clock()
        if self._failure_logged_at is None:
            what = "writing" if isinstance(exc, LogWriteError) else "flushing"
            logger.error(
                "%s placement log rows failed; they stay buffered (at most %d) and the "
                "writer retries every %.0f s",
                what,
                self.max_buffered_rows,
                self.max_interval_s,
                exc_info=exc,
            )
        elif now - self._failure_logged_at >= 60.0:
            logger.warning(
                "placement log rows still cannot be written (%s); %d buffered, %d lost so far",
                exc,
                self.pending,
                self.rows_lost,
            )
        else:
            return
        self._failure_logged_at = now

    @property
    def pending(self) -> int:
        """Rows buffered and not yet written."""
        with self._lock:
            return len(self._rows)

    def prepare(self) -> None:
        """Do now what the first flush of this process would do once: pyarrow imports
        pandas the first time it converts rows (about 0.2 s), so that a flush under a
        deadline (a stop signal, :mod:`placement.storage.shutdown`) takes milliseconds."""
        pq.write_table(_to_table([]), io.BytesIO())

    def flush(self) -> Path | None:
        """Write the buffered rows to a new Parquet file now.

        Returns
        -------
        Path or None
            The file written, or ``None`` when nothing was buffered.

        Raises
        ------
        LogWriteError
            If the file cannot be written; the rows stay buffered.

        Notes
        -----
        Rows that do not fit the log schema are dropped, since retrying cannot fix
        them: they are counted in :attr:`rows_dropped` and a warning names the first
        one's problem. The other rows are written.
        """
        with self._flush_lock:
            with self._lock:
                rows = list(self._rows)
                self._rows.clear()
                self._last_flush = self._clock()
            if not rows:
                return None
            try:
                table = _to_table(rows)
            except SchemaError:
                rows, table = self._drop_bad_rows(rows)
                if not rows:
                    return None
            self._seq += 1
            name = f"{self.prefix}-{self._seq:06d}{LOG_SUFFIX}"
            final = self.directory / name
            tmp = self.directory / f".{name}.tmp"
            try:
                pq.write_table(table, tmp)
                sync_path(tmp)  # the content is on disk before the name can be
                os.replace(tmp, final)
            except BaseException as exc:
                # whatever failed, no torn file is left and the rows wait for the next flush
                try:
                    tmp.unlink()
                except OSError:
                    pass
                with self._lock:
                    # the failed rows go back before those added meanwhile; past the bound
                    # the oldest go first (a bounded deque drops from the left as it extends)
                    excess = len(rows) + len(self._rows) - self.max_buffered_rows
                    if excess > 0:
                        self.rows_lost += excess
                    added = self._rows
                    self._rows = deque(rows, maxlen=self.max_buffered_rows)
                    self._rows.extend(added)
                    self._failing = True
                if not isinstance(exc, (OSError, pa.ArrowException)):
                    raise
                message = f"writing log file {final} failed: {exc}"
                if isinstance(exc, OSError) and exc.errno is not None:
                    raise LogWriteError(exc.errno, message) from exc
                raise LogWriteError(message) from exc
            self._sync_directory(final)
            self.rows_written += len(rows)
            self.files.append(final)
            with self._lock:
                self._failing = False
            if self._failure_logged_at is not None:  # a failure was logged: say it is over
                logger.warning(
                    "placement log rows are written again (%d lost while failing)", self.rows_lost
                )
            self._failure_logged_at = None
            return final

    def _drop_bad_rows(
        self, rows: list[Mapping[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], pa.Table | None]:
        """Drop and count the rows that do not fit the schema, keeping the others in order.

        The rows are converted in halves, recursively, down to the bad rows alone: a
        batch of tens of thousands of rows with one bad row becomes a few tables, not
        one table per row (which took seconds, under the flush lock).

        Returns
        -------
        (list, pyarrow.Table or None)
            The rows that fit and their table (``None`` when no row fits).
        """
        good: list[Mapping[str, Any]] = []
        tables: list[pa.Table] = []
        problems: list[str] = []

        def convert(part: list[Mapping[str, Any]]) -> None:
            try:
                tables.append(_to_table(part))
                good.extend(part)
                return
            except SchemaError as exc:
                if len(part) == 1:
                    if not problems:
                        row = part[0]
                        file_id = row.get("file_id") if isinstance(row, Mapping) else None
                        problems.append(f"file_id {file_id!r}: {exc}")
                    return
            half = len(part) // 2
            convert(part[:half])
            convert(part[half:])

        if rows:
            convert(list(rows))
        first_problem = problems[0] if problems else ""
        dropped = len(rows) - len(good)
        if dropped:
            self.rows_dropped += dropped
            logger.warning(
                "dropped %d of %d placement log row(s) that do not fit the log schema; first: %s",
                dropped,
                len(rows),
                first_problem,
            )
        return good, (pa.concat_tables(tables) if tables else None)

    def close(self) -> None:
        """Flush the remaining rows; the writer accepts no more. Idempotent.

        The writer refuses rows from the moment ``close`` starts. A background flush
        being written (:attr:`FlushMode.BACKGROUND`) is waited for and its thread ends;
        the final flush is written on the calling thread. If it fails
        (:class:`LogWriteError`), the rows stay buffered and calling ``close`` again
        retries it.
        """
        with self._lock:
            if self._closed and not self._rows:
                return
            self._closed = True
            flusher, self._flusher = self._flusher, None
        if flusher is not None:  # a flush it is writing ends first; it then takes no more
            self._wake.set()
            flusher.join()
        self.flush()

    def record_unlogged(self, record: Mapping[str, Any]) -> Path:
        """Write ``record``, what is known of temporary files that went without a log row,
        as a hidden JSON file in the log directory (atomically and durably, as log files are).

        A store calls it when it removes the files of a dead store
        (:meth:`~placement.storage.store.TieredFileStore.cleanup_orphans`): their rows
        were never made, and the log schema has no way to flag a row as incomplete, so
        their count is kept beside the logs instead of being lost. :func:`read_logs`
        reads the records back (:attr:`LogSet.unlogged`).

        Parameters
        ----------
        record : mapping
            JSON-ready; by convention ``files`` (count) and ``bytes`` (in bytes).

        Returns
        -------
        Path
            The file written: ``.unlogged-<prefix>-<n>.json``.

        Raises
        ------
        LogWriteError
            If the file cannot be written.
        """
        with self._lock:
            self._records += 1
            name = f"{UNLOGGED_PREFIX}{self.prefix}-{self._records:06d}{UNLOGGED_SUFFIX}"
        final = self.directory / name
        tmp = self.directory / f"{name}.tmp"
        try:
            tmp.write_text(json.dumps(dict(record), sort_keys=True) + "\n")
            sync_path(tmp)
            os.replace(tmp, final)
        except (OSError, TypeError, ValueError) as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            message = f"writing the record of unlogged files {final} failed: {exc}"
            if isinstance(exc, OSError) and exc.errno is not None:
                raise LogWriteError(exc.errno, message) from exc
            raise LogWriteError(message) from exc
        self._sync_directory(final)
        return final

    def _sync_directory(self, written: Path) -> None:
        """Make the rename of ``written`` durable: sync the log directory's entries.

        The file is complete and visible by then, so a failure (a file system that cannot
        sync a directory) does not put its rows back, which would write them twice: it is
        logged, as a warning the first time and at debug level after, and a power loss
        before the file system writes the entry itself may then lose the file.
        """
        try:
            sync_path(self.directory)
        except OSError as exc:
            level = logging.DEBUG if self._directory_sync_failed else logging.WARNING
            self._directory_sync_failed = True
            logger.log(
                level,
                "log file %s is written but its directory could not be synced (%s): "
                "a power loss may still lose it",
                written,
                exc,
            )

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<LogWriter {self.directory}/{self.prefix}-*: {self.rows_written} rows written>"


def sync_path(path: str | os.PathLike[str]) -> None:
    """Flush what is written to ``path`` to its disk: a file's content, or a directory's
    entries (the names renamed into it).

    Raises
    ------
    OSError
        If ``path`` cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """``rows`` as a table of :data:`SCHEMA`.

    Raises
    ------
    SchemaError
        If a row does not fit the schema: an unknown type, a value out of its column's
        range, or a missing value in a required column.
    """
    try:
        table = pa.Table.from_pylist([dict(r) for r in rows], schema=SCHEMA)
    except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"{len(rows)} log row(s) do not fit the log schema: {exc}") from exc
    nulls = [f.name for f in SCHEMA if not f.nullable and table[f.name].null_count]
    if nulls:
        raise SchemaError(
            f"{len(rows)} log row(s) have no value in the required column(s) {nulls}; "
            "give every row a value in each required column of the log schema"
        )
    return table


@dataclass
class LogSet:
    """Rows read from a set of log files, and the files that could not be used."""

    table: pa.Table
    files: list[Path] = field(default_factory=list)
    #: (path, reason) of every file skipped because it is unreadable or does not fit the schema.
    bad_files: list[tuple[Path, str]] = field(default_factory=list)
    #: Records of temporary files that went without a row (:meth:`LogWriter.record_unlogged`),
    #: found in the directories read.
    unlogged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unlogged_files(self) -> int:
        """Temporary files that went without a row, by :attr:`unlogged` (0 if none)."""
        return sum(int(r.get("files", 0) or 0) for r in self.unlogged)


def log_files(
    path: str | os.PathLike[str], unreadable: list[tuple[Path, str]] | None = None
) -> list[Path]:
    """The ``*.parquet`` log files at ``path`` (a file, or a directory searched recursively).

    Hidden names below ``path`` are skipped: in-progress ``.tmp`` files and hidden
    directories, such as the ``.parts-*`` of a collection still running or interrupted
    (:func:`placement.collect.collect`); give such a directory itself to read it. So are
    the files a merged file of the same directory holds
    (:func:`~placement.compacted.skip_compacted`): a directory's rows are each listed once
    while it is being compacted.

    Parameters
    ----------
    path : path
        A log file or a directory of them.
    unreadable : list, optional
        Receives ``(directory, reason)`` for each directory below ``path`` that cannot be
        listed (its logs are then not found); without it such directories raise, so that
        none is passed over silently.

    Raises
    ------
    FileNotFoundError
        If ``path`` is neither a file nor a directory.
    OSError
        If a directory cannot be listed and ``unreadable`` is not given.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"no log file or directory at {p}")

    def cannot_list(exc: OSError) -> None:
        if unreadable is None:
            raise exc
        where = Path(exc.filename) if exc.filename else p
        unreadable.append(
            (
                where,
                f"unreadable directory ({exc.strerror or exc}): its logs "
                "were not read; check its permissions",
            )
        )

    found: list[Path] = []
    for root, dirs, names in os.walk(p, onerror=cannot_list):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # hidden: skipped
        found.extend(
            Path(root) / n for n in names if n.endswith(LOG_SUFFIX) and not n.startswith(".")
        )
    return skip_compacted(found, relist=True)


def kept_parts_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The hidden ``.parts-*`` directories below directory ``path`` that hold log files: the
    logs an interrupted collection kept, which :func:`log_files` of ``path`` skips.

    Returns
    -------
    list of Path
        Sorted; empty if ``path`` is not a directory or holds none.
    """
    p = Path(path)
    if not p.is_dir():
        return []
    found = []
    for d in sorted(p.rglob(f"{PARTS_PREFIX}*")):
        try:
            if d.is_dir() and log_files(d):
                found.append(d)
        except OSError:  # removed or unreadable while looking: not one to point at
            continue
    return found


def unlogged_record_files(path: str | os.PathLike[str]) -> list[Path]:
    """The records of unlogged files (:meth:`LogWriter.record_unlogged`) below directory
    ``path``, outside hidden directories (as :func:`log_files`); empty for a file."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted(
        f
        for f in p.rglob(f"{UNLOGGED_PREFIX}*{UNLOGGED_SUFFIX}")
        if not any(part.startswith(".") for part in f.relative_to(p).parent.parts)
    )


def read_logs(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> LogSet:
    """Read and concatenate log files, conforming each to the schema.

    Files that cannot be read or do not fit the schema, and directories that cannot be
    listed, are skipped and listed in :attr:`LogSet.bad_files`; they never stop the others
    from being read. A directory being compacted is read with each row once: the files a
    merged file holds are skipped (:func:`~placement.compacted.skip_compacted`), and a file
    listed but merged and deleted before its read is read from the merged file
    (:func:`~placement.compacted.read_covered`), as is a path given that is gone and that a
    merged file holds. The records of temporary files
    that went without a row, in the directories read, are collected in
    :attr:`LogSet.unlogged` (an unreadable one is listed in :attr:`LogSet.bad_files`).

    Raises
    ------
    FileNotFoundError
        If a path given is neither a file nor a directory, and no merged file holds it.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    unlogged: list[dict[str, Any]] = []
    bad: list[tuple[Path, str]] = []
    tables: list[pa.Table] = []
    good: list[Path] = []
    for p in paths:
        if not os.path.lexists(p):  # a file listed earlier, merged and deleted since?
            try:
                covered = read_covered(p)
                if covered is not None:
                    tables.append(conform(covered))
                    good.append(Path(p))
                    continue
            except (OSError, pa.ArrowException, SchemaError) as exc:
                bad.append((Path(p), f"{type(exc).__name__}: {exc}"))
                continue
        files.extend(log_files(p, unreadable=bad))
        for record_file in unlogged_record_files(p):
            try:
                record = json.loads(record_file.read_text())
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as exc:
                bad.append((record_file, f"{type(exc).__name__}: {exc}"))
                continue
            unlogged.append({**record, "path": str(record_file)})
    for f in files:
        try:
            try:
                table = pq.read_table(f)
            except FileNotFoundError:
                # merged and deleted since it was listed: its rows are in the merged file
                covered = read_covered(f)
                if covered is None:
                    raise
                table = covered
            tables.append(conform(table))
            good.append(f)
        except (OSError, pa.ArrowException, SchemaError) as exc:
            bad.append((f, f"{type(exc).__name__}: {exc}"))
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    return LogSet(table=table, files=good, bad_files=bad, unlogged=unlogged)
