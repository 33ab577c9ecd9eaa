"""Counting skipped input: a damaged file met by several chunks is one file."""

from __future__ import annotations

import itertools

from logs_analysis.issues import ReadIssues

DAMAGED = "damaged Parquet file (unreadable row groups skipped)"


def _chunk(source: str, rows: str) -> ReadIssues:
    issues = ReadIssues()
    issues.add(DAMAGED, source, rows, "Couldn't deserialize thrift", per_file=True)
    return issues


def test_a_file_counted_per_file_counts_once_however_chunks_merge() -> None:
    parts = [
        _chunk("a.parquet", "rows 0-99"),
        _chunk("a.parquet", "rows 200-299"),
        _chunk("b.parquet", "rows 0-9"),
        _chunk("a.parquet", "rows 400-499"),
    ]
    for order in itertools.permutations(parts):
        # merged pairwise in a tree, as the parallel pass does, or one after the other
        left = ReadIssues().merge(order[0]).merge(order[1])
        right = ReadIssues().merge(order[2]).merge(order[3])
        for merged in (ReadIssues().merge(left).merge(right), ReadIssues.combine(order)):
            assert merged.counts == {DAMAGED: 2}
            assert merged.malformed == 2 and merged.skipped_inputs == 0
            # every damaged part is still an example, with its place in the file
            assert sorted(e.location for e in merged.examples) == [
                "rows 0-9",
                "rows 0-99",
                "rows 200-299",
                "rows 400-499",
            ]
    one = ReadIssues()
    one.add(DAMAGED, "a.parquet", "rows 0-99", per_file=True)
    one.add(DAMAGED, "a.parquet", "rows 200-299", per_file=True)
    one.add("negative read_ops", "a.parquet", "row 250")
    assert one.counts == {DAMAGED: 1, "negative read_ops": 1}
