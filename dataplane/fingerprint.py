"""A dataset's identity: its fingerprint, and a summary of it in words.

A cache of augmented samples is valid for the dataset it was built from; the
fingerprint says whether a source is still that dataset, and the summary names it in
messages (a stale cache's refusal, ``dataplane cache info``).

* :func:`files_identity` hashes files' paths, sizes and modification times (one
  ``stat`` per file, never their bytes) with xxh3-128, plus any data given along
  (labels, column names), and totals them (:class:`FilesSummary`). The built-in
  sources (:mod:`dataplane.sources`) fingerprint themselves with it.
* :func:`fingerprint_and_summary` gives any :class:`~dataplane.sources.Source`'s
  fingerprint and :class:`DatasetSummary`: from one pass over the files for the
  built-in sources, from :meth:`~dataplane.sources.Source.fingerprint` and its class
  name for another.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    from dataplane.sources import Source


@dataclasses.dataclass(frozen=True)
class FilesSummary:
    """Totals over a dataset's files, taken in the pass that fingerprints them.

    Attributes
    ----------
    count : int
        Number of files.
    total_bytes : int
        Sum of their sizes, in bytes.
    newest_mtime_ns : int
        Latest modification time among them, in nanoseconds since the Unix epoch
        (0 when there are no files).
    """

    count: int
    total_bytes: int
    newest_mtime_ns: int


@dataclasses.dataclass(frozen=True)
class DatasetSummary:
    """A source in words: what a message says about the dataset a cache was built for.

    Attributes
    ----------
    kind : str
        ``"image folder"``, ``"file list"``, ``"Parquet"``, or the class name of
        another source.
    location : str
        Its folder or file; for a file list, the folder holding all its files
        (empty when unknown).
    num_classes : int
        Number of classes.
    covers : str
        What its fingerprint covers, in words.
    files : FilesSummary or None
        Totals over its files (None for a source that does not give them).
    """

    kind: str
    location: str
    num_classes: int
    covers: str
    files: FilesSummary | None = None


def files_identity(
    paths: Iterable[str | os.PathLike[str]], extra: object = None
) -> tuple[str, FilesSummary]:
    """:func:`files_fingerprint` and totals over the files, in one ``stat`` per file.

    Parameters
    ----------
    paths : iterable of path
        Files, in a meaningful order (the hash depends on it).
    extra : object, optional
        JSON-serialisable data hashed along (e.g. labels, column names).

    Returns
    -------
    tuple of (str, FilesSummary)
        The fingerprint (32 hex digits) and the files' count, total size and
        newest modification time. A missing file (a file list read with
        ``on_corrupt="skip"``) is hashed as missing by its path and left out of
        the totals.
    """
    h = xxhash.xxh3_128()
    count = total = newest = 0
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:  # hashed as missing: its coming back changes the hash
            h.update(f"{os.fspath(path)}\0missing\n".encode())
            continue
        h.update(f"{os.fspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        count += 1
        total += st.st_size
        newest = max(newest, st.st_mtime_ns)
    if extra is not None:
        h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest(), FilesSummary(count, total, newest)


def files_fingerprint(paths: Iterable[str | os.PathLike[str]], extra: object = None) -> str:
    """Hash of files' paths, sizes and modification times (plus ``extra``).

    Parameters
    ----------
    paths : iterable of path
        Files, in a meaningful order (the hash depends on it).
    extra : object, optional
        JSON-serialisable data hashed along (e.g. labels, column names).

    Returns
    -------
    str
        32 hex digits (xxh3-128). Changes when a file is added, removed,
        renamed, resized or touched.
    """
    return files_identity(paths, extra)[0]


def dataset_fingerprint(source: Source) -> str:
    """The fingerprint of ``source`` (see :meth:`~dataplane.sources.Source.fingerprint`)."""
    return source.fingerprint()


def fingerprint_and_summary(source: Source) -> tuple[str, DatasetSummary]:
    """The fingerprint of ``source`` and a summary of it in words.

    The built-in sources give both from one pass over their files (their
    ``fingerprint_and_summary`` method); another source gives its
    :meth:`~dataplane.sources.Source.fingerprint`, and its summary is its class name, with no
    location or file totals.

    Returns
    -------
    tuple of (str, DatasetSummary)
    """
    both = getattr(source, "fingerprint_and_summary", None)
    if callable(both):
        fingerprint, summary = both()
        return str(fingerprint), summary
    return source.fingerprint(), DatasetSummary(
        kind=type(source).__name__,
        location="",
        num_classes=int(source.num_classes),
        covers=f"what {type(source).__name__}.fingerprint() hashes",
    )
