"""Log readers: each turns one kind of source into placement-log rows.

* :mod:`~logs_analysis.readers.native` - placement logs: the Parquet files the service
  writes, and JSON lines holding the same columns;
* :mod:`~logs_analysis.readers.spark` - Spark event logs (plain, compressed, rolling);
* :mod:`~logs_analysis.readers.darshan` - Darshan logs (optional ``darshan`` package).

:func:`plan` splits sources into :class:`~logs_analysis.readers.base.Chunk` s (read in
parallel by :mod:`logs_analysis.aggregate`); :func:`read_table` reads small inputs
into one table at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa

from logs_analysis.errors import InputError
from logs_analysis.formats import Container, LogFormat, Source, discover
from logs_analysis.issues import ReadIssue, ReadIssues
from logs_analysis.readers.base import Chunk, ChunkResult

__all__ = ["Chunk", "ChunkResult", "plan", "read_table"]


def plan(sources: Sequence[Source]) -> tuple[list[Chunk], ReadIssues]:
    """Chunks of every source, and the issues met while planning (unusable files).

    Parquet logs that a merged log file among the sources holds (a directory being
    compacted: :func:`~logs_analysis.readers.native.skip_compacted_files`) are left out.
    The merged files a directory's listing missed (one made while a compaction renamed a
    merged file in and deleted its parts) are among the sources already: :func:`discover`
    lists every walked directory's merged files again.
    """
    from logs_analysis.readers.native import skip_compacted_files

    chunks: list[Chunk] = []
    issues = ReadIssues()
    # files a merged log file beside them holds: read from the merged file only
    held = skip_compacted_files([s.path for s in sources if s.container is Container.PARQUET])
    for source in sources:
        if source.path in held:
            continue
        found: Sequence[Chunk]
        if source.container is Container.PARQUET:
            from logs_analysis.readers.native import plan_parquet

            found, more = plan_parquet(source.path)
        elif source.container is Container.JSONL:
            from logs_analysis.readers.native import plan_jsonl

            found, more = plan_jsonl(source.path)
        elif source.format is LogFormat.SPARK:
            from logs_analysis.readers.spark import plan_spark

            found, more = plan_spark(source.path)
        else:
            from logs_analysis.readers.darshan import plan_darshan

            found, more = plan_darshan(source.path)
        chunks.extend(found)
        issues.merge(more)
    return chunks, issues


def read_table(
    paths: Sequence[str | os.PathLike[str]], fmt: LogFormat | str = LogFormat.AUTO
) -> tuple[pa.Table, ReadIssues]:
    """Read ``paths`` into one table of usable rows (in memory; for small inputs).

    Returns
    -------
    (pyarrow.Table, ReadIssues)
        Rows conformed to :data:`placement.schema.SCHEMA` that pass the row checks of
        :mod:`logs_analysis.validate` (duplicate keys dropped), and every file, line or
        row skipped.

    Raises
    ------
    InputError
        If a path is missing or empty, or no usable row was found.
    FormatError
        If a named file's format cannot be told (see :func:`logs_analysis.formats.discover`).
    """
    from logs_analysis.validate import drop_duplicates, duplicate_rows, key_hashes, usable_rows

    sources, issues = discover(list(paths), fmt)
    chunks, more = plan(sources)
    issues.merge(more)
    loaded = []
    lines_before: dict[tuple[str, int], int] = {}
    seen_lines: dict[str, int] = {}
    for chunk in chunks:
        result = chunk.load()
        table, bad, kept = usable_rows(result)
        issues.merge(result.issues).merge(bad)
        if result.block_start is not None:
            lines_before[(result.source, result.block_start)] = seen_lines.get(result.source, 0)
            seen_lines[result.source] = seen_lines.get(result.source, 0) + result.lines
        loaded.append((result, table, kept))
    # rows whose (run_id, file_id) was read before are dropped, as in the aggregate pass
    duplicates = duplicate_rows(
        [key_hashes(table) for _, table, _ in loaded], [r.source for r, _, _ in loaded]
    )
    tables = []
    for i, (result, table, kept) in enumerate(loaded):
        table, repeated = drop_duplicates(table, result, kept, duplicates.get(i))
        issues.merge(repeated)
        tables.append(table)
    issues.resolve_lines(lines_before)
    rows = sum(t.num_rows for t in tables)
    if rows == 0:
        raise InputError(no_rows_message(paths, issues))
    # Parquet chunks keep id columns dictionary-encoded; one table needs one schema
    return pa.concat_tables([_decoded(t) for t in tables]), issues


def _decoded(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded columns cast to their value type."""
    if not any(pa.types.is_dictionary(f.type) for f in table.schema):
        return table
    fields = [
        pa.field(f.name, f.type.value_type, f.nullable) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def no_rows_message(paths: Sequence[str | os.PathLike[str]], issues: ReadIssues) -> str:
    """The error text for inputs that yielded no usable row: the counts by reason, then the
    first example of each reason (its file, place and detail: a column's name and type, the
    line that did not parse), so the error says what to fix without the report."""
    why = (
        "; ".join(f"{n} x {reason}" for reason, n in issues.counts.items())
        or "they hold no intermediate-data records"
    )
    first: dict[str, ReadIssue] = {}
    for example in issues.examples:
        first.setdefault(example.reason, example)
    examples = ""
    for e in first.values():
        where = f"{e.source} {e.location}" if e.location else e.source
        examples += f"\n  {e.reason}: {where}" + (f": {e.detail}" if e.detail else "")
    return (
        f"no usable log rows in {', '.join(map(str, paths))} ({why}); give placement logs, Spark "
        f"event logs with shuffle writes or spills, or Darshan logs with POSIX records{examples}"
    )
