"""Counting skipped input: a damaged file met by several chunks is one file."""

from __future__ import annotations

import itertools

from logs_analysis.issues import MAX_EXAMPLES, ReadIssues

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


def test_a_reason_added_many_times_keeps_a_few_examples() -> None:
    issues = ReadIssues()
    for i in range(7):
        issues.add("invalid JSON", "log.jsonl", line=i + 1)
    assert issues.counts == {"invalid JSON": 7}
    assert [e.location for e in issues.examples] == [f"line {i + 1}" for i in range(MAX_EXAMPLES)]
    assert MAX_EXAMPLES == 5


def test_merged_examples_stay_a_few_per_reason() -> None:
    def four(source: str) -> ReadIssues:
        issues = ReadIssues()
        for i in range(4):
            issues.add("invalid JSON", source, line=i + 1)
        issues.add("empty file", source)
        return issues

    merged = four("a.jsonl").merge(four("b.jsonl"))
    assert merged.counts == {"invalid JSON": 8, "empty file": 2}
    examples = [(e.source, e.location) for e in merged.examples if e.reason == "invalid JSON"]
    assert examples == [("a.jsonl", f"line {i + 1}") for i in range(4)] + [("b.jsonl", "line 1")]
    assert sum(e.reason == "empty file" for e in merged.examples) == 2
