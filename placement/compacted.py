"""Merged log files (``*.compacted.parquet``) and the rule by which readers count each row once.

``dataplane placement compact`` (:mod:`placement.compact`) merges a log directory's small
files into larger ones. A merged file is renamed into place before the files it holds are
deleted, so a reader may find both (a compaction running, or one that stopped between its
rename and its deletes). The merged file's Parquet metadata lists the files it holds
(:data:`COMPACTED_FROM_KEY`, :class:`CompactedPart`), and every reader of a log directory
(:func:`placement.logwriter.read_logs`, ``dataplane report``) applies the same rule:

* a file that a merged file of its directory lists, at the size listed, is not read
  (:func:`skip_compacted`);
* a file listed by a reader, then merged and deleted before its read, is read from the
  merged file that now holds it (:func:`read_covered`);
* a directory listing is no snapshot: one made while a compaction renames a merged file
  in and deletes its parts may see neither, so a reader that lists a directory lists its
  merged files again (:func:`merged_names`) and reads those the listing missed
  (:func:`skip_compacted` with ``relist``; the report's discovery does the same).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "COMPACTED_FROM_KEY",
    "COMPACTED_SUFFIX",
    "CompactedPart",
    "compacted_parts",
    "covering_part",
    "merged_names",
    "read_covered",
    "skip_compacted",
]

#: Name suffix of a log file merged from smaller ones (:mod:`placement.compact`); no
#: :class:`LogWriter` name ends so (theirs end in ``-<sequence>.parquet``).
COMPACTED_SUFFIX = ".compacted.parquet"
#: Parquet key-value metadata key of a merged log file: the JSON list of the files it holds
#: (:class:`CompactedPart`), by which readers skip those files (:func:`skip_compacted`).
COMPACTED_FROM_KEY = b"dataplane.placement.compacted_from"


@dataclass(frozen=True)
class CompactedPart:
    """One file whose rows a merged log file holds (:mod:`placement.compact`).

    Attributes
    ----------
    name : str
        The file's name (in the merged file's directory).
    first_row : int
        Index of its first row in the merged file (0-based).
    rows : int
        Its rows, ``first_row`` to ``first_row + rows - 1`` of the merged file.
    size_bytes : int
        Its size in bytes: a file of that name and another size is not this one (a name
        used again) and is read.
    """

    name: str
    first_row: int
    rows: int
    size_bytes: int

    def to_json(self) -> list[Any]:
        """``[name, first_row, rows, size_bytes]``, as the metadata stores it."""
        return [self.name, self.first_row, self.rows, self.size_bytes]


def compacted_parts(path: str | os.PathLike[str]) -> dict[str, CompactedPart]:
    """The files merged log file ``path`` holds, by name (from its Parquet footer only).

    A merged file merged again lists the files its parts held too (their rows at their
    place in the new file), so that a leftover of any earlier merge is recognised.

    Returns
    -------
    dict
        Name -> :class:`CompactedPart`; empty if ``path`` is no merged file.

    Raises
    ------
    OSError, pyarrow.ArrowException
        If the footer cannot be read (the file is gone, or damaged).
    ValueError
        If the list in the metadata is malformed.
    """
    metadata = pq.read_metadata(path).metadata or {}
    raw = metadata.get(COMPACTED_FROM_KEY)
    if raw is None:
        return {}
    entries = json.loads(raw)
    if not isinstance(entries, list):
        raise ValueError(f"{COMPACTED_FROM_KEY.decode()} of {path} is not a JSON list")
    parts: dict[str, CompactedPart] = {}
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)):
            raise ValueError(f"{COMPACTED_FROM_KEY.decode()} of {path} has a bad entry {entry!r}")
        part = CompactedPart(entry[0], int(entry[1]), int(entry[2]), int(entry[3]))
        parts[part.name] = part
    return parts


def merged_names(directory: str | os.PathLike[str]) -> set[str]:
    """Names of the merged log files (``*.compacted.parquet``, not hidden) in ``directory`` now.

    Lists ``directory`` again, for a reader whose listing of it may have missed a merged
    file renamed in while it listed (see the module docstring).

    Returns
    -------
    set of str
        File names; empty if ``directory`` cannot be listed.
    """
    try:
        with os.scandir(directory) as entries:
            return {
                e.name
                for e in entries
                if e.name.endswith(COMPACTED_SUFFIX) and not e.name.startswith(".")
            }
    except OSError:
        return set()


def _covered(directory: Path, merged: Iterable[str]) -> dict[str, CompactedPart]:
    """The parts the merged files ``merged`` of ``directory`` hold, by name; a merged file
    whose footer cannot be read (gone, or damaged: read as any log file) covers nothing."""
    covered: dict[str, CompactedPart] = {}
    for name in sorted(merged):
        try:
            covered.update(compacted_parts(directory / name))
        except (OSError, pa.ArrowException, ValueError):
            continue
    return covered


def _is_part(path: Path, part: CompactedPart) -> bool:
    """Whether ``path`` is the file ``part`` names: same size, or gone already."""
    try:
        return path.stat().st_size == part.size_bytes
    except FileNotFoundError:
        return True
    except OSError:
        return False


def skip_compacted(files: Iterable[Path], *, relist: bool = False) -> list[Path]:
    """``files`` (sorted) without those a merged log file of their directory holds.

    The reader-side rule of compaction (:mod:`placement.compact`): a merged file is
    renamed into place before the files it holds are deleted, so a reader may find both
    (a compaction running, or one that stopped between the two); the merged file's
    metadata lists the files it holds (:func:`compacted_parts`), and a file so listed,
    of the size listed, is not read.

    Parameters
    ----------
    files : iterable of Path
        Log files, as listed.
    relist : bool
        The files are whole directory listings: the merged files in each of their
        directories are listed again, and those not among ``files`` added. A listing
        is no snapshot: one made while a compaction renames a merged file in and deletes
        its parts may see neither; the merged file is found again here. (Its parts are
        skipped, whether the listing saw them or not.)

    Returns
    -------
    list of Path
        Sorted by path.
    """
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    kept: list[Path] = []
    for directory, listed in by_dir.items():
        merged = {f.name for f in listed if f.name.endswith(COMPACTED_SUFFIX)}
        if relist:
            new = merged_names(directory) - merged
            listed = listed + [directory / n for n in new]
            merged |= new
        if not merged:
            kept.extend(listed)
            continue
        covered = _covered(directory, merged)
        kept.extend(f for f in listed if f.name not in covered or not _is_part(f, covered[f.name]))
    return sorted(set(kept))


def covering_part(path: str | os.PathLike[str]) -> tuple[Path, CompactedPart] | None:
    """The merged file of ``path``'s directory that holds log file ``path`` now, and where in
    it; ``None`` if none does. Reads the footers of the directory's merged files only."""
    p = Path(path)
    for name in sorted(merged_names(p.parent)):
        try:
            part = compacted_parts(p.parent / name).get(p.name)
        except (OSError, pa.ArrowException, ValueError):
            continue
        if part is not None:
            return p.parent / name, part
    return None


def read_covered(path: str | os.PathLike[str], *, attempts: int = 3) -> pa.Table | None:
    """The rows of log file ``path``, gone, from the merged file of its directory that holds
    them now; ``None`` if none does.

    A reader lists a directory, then reads its files: a compaction may merge and delete
    a listed file in between. Its rows are then read from the merged file, only its rows
    (the merged file's other parts were listed and read, or not, on their own).

    Parameters
    ----------
    path : path
        The log file that is gone.
    attempts : int
        Tries: a merged file may be merged again and deleted between its listing and
        its read, its parts then held by the newer one.

    Raises
    ------
    OSError, pyarrow.ArrowException
        If the merged file holding them cannot be read.
    """
    for attempt in range(max(attempts, 1)):
        found = covering_part(path)
        if found is None:
            return None
        merged, part = found
        try:
            return pq.read_table(merged).slice(part.first_row, part.rows)
        except FileNotFoundError:
            if attempt == max(attempts, 1) - 1:
                raise
    return None
