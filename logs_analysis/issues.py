"""Counting malformed input without failing: :class:`ReadIssues`.

Readers never stop at a bad line or record. Each is counted by reason, and the first
few (:data:`MAX_EXAMPLES` per reason) are kept with the file and the line (or row) they
came from, so the report can show them. Issues from parallel chunks are merged with
:meth:`ReadIssues.merge`.

Two kinds are told apart (:attr:`ReadIssues.skipped_inputs`, :attr:`ReadIssues.malformed`):
whole inputs left unread because they are not logs (or hold nothing to read), cannot be
reached or were given twice (:data:`SKIPPED_INPUT_REASONS`: a ``README.md`` beside event
logs, a Parquet file without the placement columns, a Darshan log without POSIX records,
a file read as a Spark event log in which no line is a listener event, an unreadable
folder), each counted once, and malformed or duplicate lines, records and rows, or damaged
logs (everything else; a damaged file is counted once, as a file).

A damaged file can be met by several chunks read in parallel (a Parquet log whose row
groups are read in parts): such a reason is added with ``per_file=True`` and counts one
per file however many chunks meet it, in whatever order they are merged; each meeting
may still leave an example (its place in the file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

__all__ = ["MAX_EXAMPLES", "SKIPPED_INPUT_REASONS", "ReadIssue", "ReadIssues"]

#: Examples kept per reason.
MAX_EXAMPLES = 5
#: Reasons that count whole inputs (files, folders) left unread because they are not logs
#: (or hold nothing to read), cannot be reached or were given twice, not malformed data.
SKIPPED_INPUT_REASONS = frozenset(
    {
        "unrecognised format (skipped)",
        "not a placement log: missing required columns (skipped)",
        "newer log schema version (skipped)",
        "no POSIX module records (skipped)",
        "not a Spark event log: no listener events (skipped)",
        "empty file",
        "not a regular file (skipped)",
        "unreadable file",
        "unsupported or damaged file (skipped)",
        "unreadable directory (skipped)",
        "duplicate path (read once)",
    }
)


@dataclasses.dataclass(frozen=True)
class ReadIssue:
    """One malformed line, record or file.

    Attributes
    ----------
    source : str
        The file it came from.
    location : str
        Where in the file: ``"line 12"``, ``"row 4031"``, ``"record 7"`` or ``""`` (whole file).
    reason : str
        What is wrong, e.g. ``"invalid JSON"`` or ``"deleted before created"``.
    detail : str
        A short excerpt or message (at most 200 characters).
    line : int or None
        1-based line number (for line-oriented inputs).
    block_start : int or None
        Byte offset of the block ``line`` counts from, while it is still relative to a
        block read in parallel; ``None`` once ``line`` counts from the start of the file
        (see :meth:`ReadIssues.resolve_lines`).
    """

    source: str
    location: str
    reason: str
    detail: str = ""
    line: int | None = None
    block_start: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "location": self.location,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclasses.dataclass
class ReadIssues:
    """Malformed lines and records, counted by reason, with the first few kept.

    Attributes
    ----------
    counts : dict of str to int
        Lines, records or files skipped, by reason.
    examples : list of ReadIssue
        At most :data:`MAX_EXAMPLES` per reason, in the order they were found.
    per_file : set of (str, str)
        The ``(reason, source)`` pairs counted once per file (``add(..., per_file=True)``).
    """

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: list[ReadIssue] = dataclasses.field(default_factory=list)
    per_file: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    @property
    def total(self) -> int:
        """Lines, records and files skipped, all reasons together."""
        return int(sum(self.counts.values()))

    @property
    def skipped_inputs(self) -> int:
        """Files and folders left unread: not logs, unreachable or given twice
        (:data:`SKIPPED_INPUT_REASONS`)."""
        return int(sum(n for r, n in self.counts.items() if r in SKIPPED_INPUT_REASONS))

    @property
    def malformed(self) -> int:
        """Malformed or duplicate lines, records and rows, and damaged logs: the rest."""
        return self.total - self.skipped_inputs

    def __bool__(self) -> bool:
        return self.total > 0

    def add(
        self,
        reason: str,
        source: str,
        location: str = "",
        detail: str = "",
        count: int = 1,
        *,
        line: int | None = None,
        block_start: int | None = None,
        per_file: bool = False,
    ) -> None:
        """Count ``count`` skipped items of ``reason``; keep this one as an example if there is
        room.

        ``line`` (1-based) sets ``location`` to ``"line N"``; with ``block_start`` the line
        counts from that byte offset of the file until :meth:`resolve_lines` is called.
        With ``per_file``, ``source`` is counted once for ``reason`` (``count`` is
        ignored), here and in every :meth:`merge`: a file damaged in several places is
        one damaged file; each place may still be an example. A reason is either always
        added ``per_file`` or never.
        """
        if per_file:
            key = (reason, str(source))
            count = 0 if key in self.per_file else 1
            self.per_file.add(key)
            self.counts.setdefault(reason, 0)
        elif count <= 0:
            return
        self.counts[reason] = self.counts.get(reason, 0) + count
        if sum(1 for e in self.examples if e.reason == reason) < MAX_EXAMPLES:
            if line is not None and not location:
                location = f"line {line}"
            self.examples.append(
                ReadIssue(str(source), location, reason, _clip(detail), line, block_start)
            )

    def resolve_lines(self, lines_before: dict[tuple[str, int], int]) -> None:
        """Turn block-relative line numbers into file line numbers.

        Parameters
        ----------
        lines_before : dict
            ``(source, block_start) -> number of lines`` in the file before that block.
        """
        out = []
        for e in self.examples:
            if e.block_start is not None and e.line is not None:
                line = e.line + lines_before.get((e.source, e.block_start), 0)
                e = dataclasses.replace(e, line=line, location=f"line {line}", block_start=None)
            out.append(e)
        self.examples = out

    def merge(self, other: ReadIssues) -> ReadIssues:
        """Add ``other``'s counts and examples to this one (in place); returns ``self``.

        A file counted once (``add(..., per_file=True)``) in both stays counted once.
        """
        for reason, n in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + n
        for reason, _source in other.per_file & self.per_file:
            self.counts[reason] -= 1  # counted in both: once
        self.per_file |= other.per_file
        per_reason: dict[str, int] = {}
        for e in self.examples:
            per_reason[e.reason] = per_reason.get(e.reason, 0) + 1
        for e in other.examples:
            if per_reason.get(e.reason, 0) < MAX_EXAMPLES:
                self.examples.append(e)
                per_reason[e.reason] = per_reason.get(e.reason, 0) + 1
        return self

    @classmethod
    def combine(cls, many: Iterable[ReadIssues]) -> ReadIssues:
        """One :class:`ReadIssues` holding all of ``many``."""
        out = cls()
        for item in many:
            out.merge(item)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "malformed": self.malformed,
            "skipped_inputs": self.skipped_inputs,
            "counts": dict(sorted(self.counts.items(), key=lambda kv: -kv[1])),
            "examples": [e.to_dict() for e in self.examples],
        }


def _clip(text: str, limit: int = 200) -> str:
    text = str(text).replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
