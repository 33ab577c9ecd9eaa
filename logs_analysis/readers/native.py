"""Placement logs: the service's Parquet files (:class:`placement.logwriter.LogWriter`), and
JSON lines holding the same columns (dataplane itself writes only Parquet; other tools can
write these).

Both hold placement log rows (:data:`placement.schema.SCHEMA`) as they are, so the mapping
is the identity; :func:`placement.schema.conform` adds missing nullable columns as nulls
and drops unknown ones.

Parquet
    Split into chunks of whole row groups of at most :data:`CHUNK_ROWS` rows. A file whose
    footer cannot be read (torn or not Parquet), which lacks a required column, or which
    declares a newer schema version is skipped and counted as an issue, once (its rows are
    said in the detail). A chunk that fails to read (a page that does not decode, values
    that do not convert to the log schema) is read again one row group at a time: the row
    groups that read are kept, the others skipped, and the file is counted once as
    :data:`DAMAGED_FILE` however many of its chunks are damaged, each damaged part an
    example with its rows. So a file read in one chunk or in several keeps the same rows
    and counts the same. Rows are located by their 0-based index in the file.
Compacted directories
    A merged log file (``*.compacted.parquet``, :mod:`placement.compact`) lists the files
    it holds; those found beside it are not read (:func:`skip_compacted_files`, applied
    by :func:`logs_analysis.readers.plan`), and one listed but merged and deleted before
    it is planned or read is read from the merged file, so each row is read once.
JSON lines
    One JSON object per line with log-schema keys. Split into byte ranges of about
    :data:`BLOCK_BYTES`; a line belongs to the block its first byte lies in. A block is
    parsed with pyarrow's JSON reader; if that fails, line by line, so each malformed
    line (invalid JSON or UTF-8, not an object, a value of the wrong type, an integer
    outside its column's range) is counted with its line number and the rest of the block
    is kept. A file that cannot be opened or read (gone, or no longer a regular file,
    since it was listed) is skipped and counted once, as a file.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from logs_analysis.issues import ReadIssues
from logs_analysis.readers.base import ChunkResult
from placement.compacted import COMPACTED_SUFFIX, covering_part, skip_compacted
from placement.errors import SchemaError
from placement.schema import REQUIRED_COLUMNS, SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY, conform

__all__ = [
    "BLOCK_BYTES",
    "CHUNK_ROWS",
    "DAMAGED_FILE",
    "JsonlChunk",
    "ParquetChunk",
    "plan_jsonl",
    "plan_parquet",
    "skip_compacted_files",
]

#: Most rows in one Parquet chunk (whole row groups; a larger row group is one chunk).
CHUNK_ROWS = 262_144
#: Target bytes of one JSON-lines block.
BLOCK_BYTES = 32 << 20
_SCHEMA_NAMES = frozenset(SCHEMA.names)
# a nullable copy of the schema for the JSON reader (required columns are checked later)
_JSON_SCHEMA = pa.schema([pa.field(f.name, f.type) for f in SCHEMA])
#: Reason of a Parquet file that cannot be read at all (counted once, as a file).
UNREADABLE_FILE = "unreadable Parquet file (skipped)"
#: Reason of a Parquet file some (or all) of whose row groups cannot be read: counted once
#: per file, whichever chunks meet the damage (:meth:`ReadIssues.add` ``per_file``).
DAMAGED_FILE = "damaged Parquet file (unreadable row groups skipped)"
#: Reason of a JSON-lines file that cannot be opened or read: counted once per file.
UNREADABLE_JSONL = "unreadable JSON-lines file (skipped)"
_READ_ERRORS = (OSError, pa.ArrowException, SchemaError)


def _n_rows(n: int) -> str:
    return f"{n:,} row{'s' if n != 1 else ''}"


@dataclasses.dataclass(frozen=True)
class ParquetChunk:
    """Whole row groups ``row_groups`` of one Parquet file; ``first_row`` is the file row
    index of the first of them. ``dictionary_columns`` are the :data:`DICTIONARY_COLUMNS`
    the file has, read dictionary-encoded, and ``file_rows`` the rows of the whole file
    (:func:`plan_parquet` fills them in). A chunk that cannot be read is read again row
    group by row group; the row groups that fail are skipped and the file counted once as
    :data:`DAMAGED_FILE` (each damaged run of row groups an example naming its rows)."""

    source: str
    row_groups: tuple[int, ...]
    first_row: int
    estimated_rows: int
    dictionary_columns: tuple[str, ...] = ()
    file_rows: int = 0  # 0: unknown

    def load(self) -> ChunkResult:
        issues = ReadIssues()
        try:
            with pq.ParquetFile(
                self.source, read_dictionary=list(self.dictionary_columns) or None
            ) as pf:
                try:
                    table = _read_groups(pf, list(self.row_groups))
                except _READ_ERRORS:
                    return self._load_each(pf, issues)  # keep the row groups that read
        except FileNotFoundError as exc:  # merged and deleted since planned?
            error: Exception = exc
            try:
                covered = _read_covered_rows(
                    self.source, self.first_row, self.estimated_rows, self.dictionary_columns
                )
            except _READ_ERRORS as again:
                # not str(exc): it repeats the path, and details are clipped
                error = FileNotFoundError(f"the file is gone; its merged file: {again}")
                covered = None
            if covered is None:
                self._damaged(issues, self.first_row, self.estimated_rows, error)
                return ChunkResult(SCHEMA.empty_table(), issues, self.source, self.first_row)
            return ChunkResult(covered, issues, self.source, self.first_row)
        except (OSError, pa.ArrowException) as exc:  # it cannot be opened any more
            self._damaged(issues, self.first_row, self.estimated_rows, exc)
            return ChunkResult(SCHEMA.empty_table(), issues, self.source, self.first_row)
        return ChunkResult(table, issues, self.source, self.first_row)

    def _load_each(self, pf: pq.ParquetFile, issues: ReadIssues) -> ChunkResult:
        """The chunk read one row group at a time: those that read are kept, each run of
        consecutive ones that do not is counted (:meth:`_damaged`)."""
        tables: list[pa.Table] = []
        numbers: list[np.ndarray] = []
        lost: list[tuple[int, int, Exception]] = []  # (first row, rows, first error)
        row = self.first_row
        for rg in self.row_groups:
            n = pf.metadata.row_group(rg).num_rows
            try:
                tables.append(_read_groups(pf, [rg]))
                numbers.append(np.arange(row, row + n, dtype=np.int64))
            except _READ_ERRORS as error:
                if lost and lost[-1][0] + lost[-1][1] == row:
                    lost[-1] = (lost[-1][0], lost[-1][1] + n, lost[-1][2])
                else:
                    lost.append((row, n, error))
            row += n
        for first, rows, first_error in lost:
            self._damaged(issues, first, rows, first_error)
        if not tables:
            return ChunkResult(SCHEMA.empty_table(), issues, self.source, self.first_row)
        table = pa.concat_tables(tables).unify_dictionaries()
        return ChunkResult(
            table, issues, self.source, self.first_row, row_numbers=np.concatenate(numbers)
        )

    def _damaged(self, issues: ReadIssues, first: int, n: int, exc: BaseException) -> None:
        """Count the file once as :data:`DAMAGED_FILE`, this part as an example."""
        if first == 0 and n == self.file_rows:
            why = f"the whole file ({_n_rows(n)}): {exc}"
        elif self.file_rows:
            why = f"{n:,} of the file's {_n_rows(self.file_rows)}: {exc}"
        else:
            why = f"{_n_rows(n)}: {exc}"
        issues.add(DAMAGED_FILE, self.source, f"rows {first}-{first + n - 1}", why, per_file=True)


def _read_groups(pf: pq.ParquetFile, row_groups: list[int]) -> pa.Table:
    """Row groups of ``pf`` in the log schema (:func:`conform_keeping_dictionaries`).

    Raises
    ------
    OSError, pyarrow.ArrowException
        If a page cannot be read or decoded.
    SchemaError
        If a column does not convert to the log schema.
    """
    columns = [c for c in pf.schema_arrow.names if c in _SCHEMA_NAMES]
    table = pf.read_row_groups(row_groups, columns=columns)
    return conform_keeping_dictionaries(table.replace_schema_metadata(pf.schema_arrow.metadata))


#: String id columns read dictionary-encoded (few distinct values, many rows).
DICTIONARY_COLUMNS = (
    "pipeline",
    "run_id",
    "stage",
    "job_id",
    "worker",
    "host",
    "file_kind",
    "operator",
    "tier",
)


def conform_keeping_dictionaries(table: pa.Table) -> pa.Table:
    """:func:`placement.schema.conform`, but string columns read dictionary-encoded stay so.

    Decoding them only to encode them again for grouping would double the cost of a
    read; every consumer here accepts ``dictionary<string>`` where the schema says ``string``.
    """
    kept = {}
    for name in DICTIONARY_COLUMNS:
        if name in table.column_names:
            column = table[name]
            if pa.types.is_dictionary(column.type) and pa.types.is_string(column.type.value_type):
                kept[name] = column
    if not kept:
        return conform(table)
    placeholder = table.drop_columns(list(kept))
    for name in kept:
        placeholder = placeholder.append_column(name, pa.nulls(table.num_rows, pa.string()))
    out = conform(placeholder)
    for name, column in kept.items():
        out = out.set_column(
            out.schema.get_field_index(name),
            pa.field(name, column.type, SCHEMA.field(name).nullable),
            column,
        )
    return out.unify_dictionaries()


def _read_covered_rows(
    source: str, first_row: int, rows: int, dictionary_columns: tuple[str, ...]
) -> pa.Table | None:
    """Rows ``first_row`` to ``first_row + rows - 1`` of log file ``source``, gone, read from
    the merged file that holds it now (:func:`placement.compacted.covering_part`), only
    the row groups holding them; ``None`` if no merged file holds it.

    Raises
    ------
    OSError, pyarrow.ArrowException, SchemaError
        If the merged file cannot be read.
    """
    found = covering_part(source)
    if found is None:
        return None
    merged, part = found
    start = part.first_row + first_row
    n = max(min(rows, part.rows - first_row), 0)
    with pq.ParquetFile(merged, read_dictionary=list(dictionary_columns) or None) as pf:
        groups: list[int] = []
        first = row = 0
        for rg in range(pf.metadata.num_row_groups):
            k = pf.metadata.row_group(rg).num_rows
            if row < start + n and row + k > start:
                if not groups:
                    first = row
                groups.append(rg)
            row += k
        if not groups:
            return SCHEMA.empty_table()
        return _read_groups(pf, groups).slice(start - first, n)


def _plan_covered(source: str, chunk_rows: int) -> list[ParquetChunk] | None:
    """Chunks of log file ``source``, gone since it was listed, that read its rows from
    the merged file holding it now (:meth:`ParquetChunk.load`); ``None`` if none does."""
    found = covering_part(source)
    if found is None:
        return None
    _, part = found
    present = tuple(DICTIONARY_COLUMNS)  # a merged file has every column of the schema
    return [
        ParquetChunk(source, (), first, min(chunk_rows, part.rows - first), present, part.rows)
        for first in range(0, part.rows, chunk_rows)
    ]


def plan_parquet(
    path: str | os.PathLike[str], chunk_rows: int | None = None
) -> tuple[list[ParquetChunk], ReadIssues]:
    """Chunks of one Parquet log file; a file that cannot be used is an issue, not an error.

    ``chunk_rows`` defaults to :data:`CHUNK_ROWS`. A log file merged and deleted since it
    was listed (:mod:`placement.compact`) is read from the merged file holding it.
    """
    chunk_rows = chunk_rows or CHUNK_ROWS
    source = str(path)
    issues = ReadIssues()
    try:
        pf = pq.ParquetFile(source)
    except FileNotFoundError as exc:
        covered = _plan_covered(source, chunk_rows)
        if covered is not None:
            return covered, issues
        issues.add(UNREADABLE_FILE, source, detail=str(exc))
        return [], issues
    except (OSError, pa.ArrowException) as exc:
        issues.add(UNREADABLE_FILE, source, detail=str(exc))
        return [], issues
    # a file left unread is counted once, as a file; its rows are said in the detail
    file_rows = pf.metadata.num_rows
    names = set(pf.schema_arrow.names)
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        issues.add(
            "not a placement log: missing required columns (skipped)",
            source,
            detail=f"lacks {missing} ({_n_rows(file_rows)})",
        )
        return [], issues
    declared = (pf.schema_arrow.metadata or {}).get(SCHEMA_VERSION_KEY)
    try:
        version = None if declared is None else int(declared)
    except ValueError:
        issues.add(
            UNREADABLE_FILE,
            source,
            detail=(
                f"schema version {declared!r} is not a whole number ({_n_rows(file_rows)}); "
                f"rewrite the file with {SCHEMA_VERSION_KEY.decode()!r} set to the version "
                f"its columns follow (such as {SCHEMA_VERSION}), or without it"
            ),
        )
        return [], issues
    if version is not None and version > SCHEMA_VERSION:
        issues.add(
            "newer log schema version (skipped)",
            source,
            detail=(
                f"schema version {version} > {SCHEMA_VERSION} ({_n_rows(file_rows)}); "
                "upgrade dataplane to read it"
            ),
        )
        return [], issues
    # only columns the file has: read_dictionary naming a missing one -> KeyError
    present = tuple(c for c in DICTIONARY_COLUMNS if c in names)
    chunks: list[ParquetChunk] = []
    group: list[int] = []
    group_rows = 0
    first = row = 0
    for rg in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(rg).num_rows
        if group and group_rows + n > chunk_rows:
            chunks.append(ParquetChunk(source, tuple(group), first, group_rows, present, file_rows))
            group, group_rows, first = [], 0, row
        group.append(rg)
        group_rows += n
        row += n
    if group:
        chunks.append(ParquetChunk(source, tuple(group), first, group_rows, present, file_rows))
    return chunks, issues


def skip_compacted_files(paths: list[Path]) -> set[Path]:
    """The Parquet log files among ``paths`` that a merged log file also among them, in the
    same directory, holds (:func:`placement.compacted.skip_compacted`): a directory being
    compacted, or whose compaction stopped before deleting them. Their rows are read from
    the merged file, so these are not read (nor counted as duplicate rows). A merged file
    that a directory's listing missed is among ``paths`` all the same: it is listed again
    by :func:`logs_analysis.formats.discover`."""
    if not any(p.name.endswith(COMPACTED_SUFFIX) for p in paths):
        return set()
    kept = set(skip_compacted(paths))
    return {p for p in paths if p not in kept}


@dataclasses.dataclass(frozen=True)
class JsonlChunk:
    """Lines of a JSON-lines file whose first byte lies in ``[start, end)``."""

    source: str
    start: int
    end: int
    estimated_rows: int

    def _read_block(self) -> bytes:
        with open(self.source, "rb") as f:
            if self.start > 0:
                f.seek(self.start - 1)
                f.readline()  # the line holding byte start-1 belongs to the previous block
            pos = f.tell()
            data = f.read(max(self.end - pos, 0))
            if data and not data.endswith(b"\n"):
                data += f.readline()  # finish the last line begun in this block
        return data

    def load(self) -> ChunkResult:
        issues = ReadIssues()
        try:
            data = self._read_block()
        except OSError as exc:  # gone, or no longer a file, since it was planned
            issues.add(UNREADABLE_JSONL, self.source, detail=str(exc), per_file=True)
            return ChunkResult(
                SCHEMA.empty_table(),
                issues,
                self.source,
                row_lines=np.empty(0, dtype=np.int64),
                block_start=self.start,
            )
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        keep = [i for i, line in enumerate(lines) if line.strip()]
        table: pa.Table | None = None
        if keep:
            try:
                data.decode()  # the JSON reader keeps invalid UTF-8: such a line is bad
                table = pajson.read_json(
                    io.BytesIO(data),
                    read_options=pajson.ReadOptions(
                        use_threads=False, block_size=max(len(data), 1 << 20)
                    ),
                    parse_options=pajson.ParseOptions(
                        explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore"
                    ),
                )
                if table.num_rows != len(keep):
                    table = None
            except (pa.ArrowException, ValueError):
                table = None
            if table is None:
                table, keep = _parse_lines(lines, keep, issues, self.source, self.start)
        if table is None:
            table = _JSON_SCHEMA.empty_table()
        try:
            table = conform(table)
        except SchemaError as exc:  # required column absent from every line of the block
            issues.add(
                "not a placement log row",
                self.source,
                detail=str(exc),
                count=len(keep),
                line=keep[0] + 1 if keep else 1,
                block_start=self.start,
            )
            table, keep = SCHEMA.empty_table(), []
        return ChunkResult(
            table,
            issues,
            self.source,
            row_lines=np.asarray(keep, dtype=np.int64) + 1,
            block_start=self.start,
            lines=len(lines),
        )


def _parse_lines(
    lines: list[bytes], keep: list[int], issues: ReadIssues, source: str, block_start: int
) -> tuple[pa.Table | None, list[int]]:
    """Parse line by line; bad lines are counted with their (block-relative) line number."""
    rows: list[dict[str, Any]] = []
    good: list[int] = []
    for i in keep:
        line = lines[i]
        try:
            obj = json.loads(line)
        except ValueError as exc:
            issues.add(
                "invalid JSON",
                source,
                detail=f"{exc}: {line[:80]!r}",
                line=i + 1,
                block_start=block_start,
            )
            continue
        if not isinstance(obj, dict):
            issues.add(
                "not a JSON object",
                source,
                detail=repr(line[:80]),
                line=i + 1,
                block_start=block_start,
            )
            continue
        row = {k: obj.get(k) for k in SCHEMA.names}
        bad = _bad_value(row)
        if bad:
            reason, detail = bad
            issues.add(reason, source, detail=detail, line=i + 1, block_start=block_start)
            continue
        rows.append(row)
        good.append(i)
    if not rows:
        return None, []
    return pa.Table.from_pylist(rows, schema=_JSON_SCHEMA), good


def _int_range(type_: pa.DataType) -> tuple[int, int]:
    """Smallest and largest value of an Arrow integer type."""
    bits = type_.bit_width
    if pa.types.is_signed_integer(type_):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


#: ``(smallest, largest)`` value of each integer column of :data:`SCHEMA`.
_INT_RANGES = {f.name: _int_range(f.type) for f in SCHEMA if pa.types.is_integer(f.type)}


def _bad_value(row: dict[str, Any]) -> tuple[str, str] | None:
    """``(reason, detail)`` of the first value of ``row`` its column cannot hold, else None.

    Converts the good values in place (numbers given for string columns become strings,
    integral floats of integer columns become ints). An integer outside its column's
    range (``size_bytes`` of ``10**20``, an ``int32`` column given ``2**40``) is bad too.
    """
    wrong = "value of the wrong type"
    for field in SCHEMA:
        v = row[field.name]
        if v is None:
            continue
        if pa.types.is_string(field.type):
            if not isinstance(v, str):
                row[field.name] = (
                    str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                )
                if not isinstance(row[field.name], str):
                    return wrong, f"{field.name}={v!r} is not a string"
        elif pa.types.is_integer(field.type):
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or (isinstance(v, float) and not v.is_integer())
            ):
                return wrong, f"{field.name}={v!r} is not an integer"
            lo, hi = _INT_RANGES[field.name]
            if not lo <= v <= hi:
                return "value out of range", (
                    f"{field.name}={v!r} does not fit its column ({field.type}: {lo} to {hi})"
                )
            row[field.name] = int(v)
        elif pa.types.is_floating(field.type):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return wrong, f"{field.name}={v!r} is not a number"
            try:
                row[field.name] = float(v)
            except OverflowError:
                return "value out of range", f"{field.name}={v!r} is too large for a float"
    return None


def plan_jsonl(
    path: str | os.PathLike[str], block_bytes: int | None = None
) -> tuple[list[JsonlChunk], ReadIssues]:
    """Byte-range chunks of one JSON-lines log file (rows estimated from the first lines).

    ``block_bytes`` defaults to :data:`BLOCK_BYTES`.
    """
    block_bytes = block_bytes or BLOCK_BYTES
    source = str(path)
    issues = ReadIssues()
    try:
        size = Path(source).stat().st_size
        with open(source, "rb") as f:
            head = f.read(1 << 16)
    except OSError as exc:  # gone, or no longer a file, since it was listed
        issues.add(UNREADABLE_JSONL, source, detail=str(exc), per_file=True)
        return [], issues
    n_lines = head.count(b"\n")
    per_line = len(head) / n_lines if n_lines else max(len(head), 1)
    n_blocks = max(1, math.ceil(size / block_bytes))
    step = max(1, math.ceil(size / n_blocks))  # an empty file: no chunk
    chunks = [
        JsonlChunk(
            source,
            s,
            min(s + step, size),
            int(min(s + step, size) - s) // max(int(per_line), 1) + 1,
        )
        for s in range(0, size, step)
    ]
    return chunks, issues
