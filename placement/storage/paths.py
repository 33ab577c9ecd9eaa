"""Safe file names inside a tier directory.

Every temporary file lives below its store's directory on a tier. Names come from
Dask keys and shuffle ids, and (through the placement service) from requests sent over
the network, so they are checked before any file is touched: a name must be relative,
made of plain components (no ``..``, ``.``, empty or NUL components, no backslashes),
and no existing component of the path may be a symbolic link.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from placement.storage.errors import UnsafePathError

#: Suffix of a file whose bytes are still being written.
PARTIAL_SUFFIX = ".partial"

_SUFFIXES = (PARTIAL_SUFFIX,)

#: Longest file-name component most file systems accept, in bytes.
NAME_MAX_BYTES = 255

#: Longest component a name may have, in bytes: room is kept for the ``.partial`` suffix.
MAX_COMPONENT_BYTES = NAME_MAX_BYTES - max(len(s.encode()) for s in _SUFFIXES)


def check_name(name: str) -> tuple[str, ...]:
    """Split ``name`` into its components after checking it is a safe relative name.

    Raises
    ------
    UnsafePathError
        If ``name`` is absolute, empty, contains ``..``/``.``/empty components,
        a NUL byte or a backslash, a component longer than :data:`MAX_COMPONENT_BYTES`
        (247 bytes: 255 less the ``.partial`` suffix of in-progress writes), or a
        component ending in a suffix reserved for in-progress writes.
    """
    if not isinstance(name, str) or not name:
        raise UnsafePathError(f"file name {name!r} must be a non-empty string")
    if "\x00" in name or "\\" in name:
        raise UnsafePathError(f"file name {name!r} contains a NUL byte or a backslash; use '/'")
    if name.startswith("/") or os.path.isabs(name):
        raise UnsafePathError(
            f"file name {name!r} is absolute; give a name relative to the tier directory"
        )
    parts = tuple(name.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePathError(
                f"file name {name!r} has a {part or 'empty'!r} component, which could escape "
                "the tier directory; use plain names such as 'shuffle-1/part-3'"
            )
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            raise UnsafePathError(
                f"file name component {part[:40]!r}... is longer than {MAX_COMPONENT_BYTES} "
                f"bytes ({NAME_MAX_BYTES} less room for the {PARTIAL_SUFFIX!r} suffix of "
                "in-progress writes); use a shorter name"
            )
        if part.endswith(_SUFFIXES):
            raise UnsafePathError(
                f"file name {name!r} ends in a suffix reserved for in-progress writes {_SUFFIXES}"
            )
    return parts


def resolve_within(root: Path, name: str) -> Path:
    """The path of ``name`` below ``root``, refusing names that would leave ``root``.

    Parameters
    ----------
    root : Path
        The store's directory on one tier (must exist; it may itself be reached through
        a symlink set up by the operator).
    name : str
        Relative file name, checked by :func:`check_name`.

    Raises
    ------
    UnsafePathError
        If the name is unsafe, or an existing component below ``root`` is a symlink.

    Notes
    -----
    A checked name has only plain components (no ``..``, not absolute), so the path is
    inside ``root`` by construction once no component below ``root`` is a link; that
    needs one ``lstat`` per component and no ``realpath`` (this runs for every spill
    and shuffle file). Files are then opened with ``O_NOFOLLOW``.
    """
    parts = check_name(name)
    text = os.fspath(root)
    for part in parts:
        text = os.path.join(text, part)
        if os.path.islink(text):
            raise UnsafePathError(
                f"{text} is a symbolic link; temporary files are never written through links"
            )
    return Path(text)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+-]")


def name_for_key(key: object, serial: int, *, max_len: int = 120) -> str:
    """A safe, unique, readable file name for a Dask key.

    Every character other than letters, digits and ``_.,=+-`` becomes ``_`` (so ``/``
    cannot survive), leading dots are stripped (so ``..`` cannot either), the text is
    truncated to ``max_len`` characters and suffixed with ``serial`` to stay unique.
    Example: ``('getitem-ab12', 3)`` with serial 7 gives ``__getitem-ab12_,_3_~7``.
    """
    text = _UNSAFE.sub("_", str(key))[:max_len].lstrip(".") or "key"
    return f"{text}~{serial}"
