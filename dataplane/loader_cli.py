"""What the ``dataplane`` commands that build a :class:`~dataplane.Loader` share.

* :func:`loader_options`: the Loader's options, spelled one way and with one
  meaning in ``dataplane iterate`` and ``dataplane cache build`` (``--recipe``,
  ``--size``, ``--channels``, ``--batch-size``, ``--seed``, ``--device``,
  ``--threads``, ``--on-corrupt``), so that their help, ranges and defaults cannot
  drift apart.
* :func:`cache_options`: the cache's ``--variants`` and ``--max-bytes`` (its
  ``CacheConfig``), shared by ``dataplane cache build`` and ``dataplane iterate
  --cache``.
* :func:`shard_options`: ``--rank`` and ``--world-size`` (the Loader's ``rank`` and
  ``world_size``), checked together by :func:`check_shard`.
* :func:`command_line_warnings`: the loader's warnings printed once each as
  ``Warning: message``, in the commands' words (:func:`~dataplane.errors.cli_message`),
  without the Python file and source line.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO, TypeVar

import click

from dataplane import errors
from dataplane.errors import cli_message
from dataplane.plan import MAX_SEED

__all__ = [
    "HiddenAliasOption",
    "cache_options",
    "check_shard",
    "command_line_warnings",
    "loader_options",
    "on_corrupt_option",
    "parse_bytes",
    "shard_options",
]

_Command = TypeVar("_Command", bound=Callable[..., Any])

#: Where the data plane's warnings are defined (CorruptSampleWarning, CacheWarning, ...).
_WARNINGS_MODULE = errors.__name__


class HiddenAliasOption(click.Option):
    """A click option listed in ``--help`` under its first name only.

    Its other names (older spellings, e.g. ``--num-threads`` for ``--threads``) are
    still accepted, so that scripts written with them keep working.
    """

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = names


def on_corrupt_option(more_help: str = "") -> Callable[[_Command], _Command]:
    """``--on-corrupt [raise|skip]``: the Loader's ``on_corrupt``; ``more_help`` is
    appended to its help."""
    return click.option(
        "--on-corrupt",
        type=click.Choice(["raise", "skip"]),
        default="raise",
        show_default=True,
        help="What the loader does with a corrupt or unreadable image: stop with an error "
        "naming it, or skip and count it (a warning names the skipped files when the epoch "
        "ends)." + more_help,
    )


def _device(ctx: click.Context, param: click.Parameter, value: str) -> str | None:
    return None if value == "auto" else value


def _channels(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else int(value)


def loader_options(command: _Command) -> _Command:
    """The Loader's options shared by ``dataplane iterate`` and ``dataplane cache build``.

    The command receives ``recipe`` (str), ``size`` (int or None), ``channels`` (1, 3
    or None), ``batch_size`` (int), ``seed`` (int), ``device`` ("cpu", "cuda" or None
    for CUDA when available), ``threads`` (int or None) and ``on_corrupt`` (str): the
    Loader's keyword arguments of the same meaning.
    """
    options = (
        click.option(
            "--recipe", default="train", show_default=True, help="train, eval or a custom name."
        ),
        click.option(
            "--size",
            type=click.IntRange(min=1),
            default=None,
            help="Output side in pixels [default: the images' own].",
        ),
        click.option(
            "--channels",
            type=click.Choice(["1", "3"]),
            default=None,
            callback=_channels,
            help="Output channels: 1 (grey) or 3 (RGB) [default: the images' own].",
        ),
        click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True),
        click.option(
            "--seed",
            type=click.IntRange(min=0, max=MAX_SEED - 1),
            default=0,
            show_default=True,
            help="Seed of the epoch order and the augmentation (below 2**48).",
        ),
        click.option(
            "--device",
            type=click.Choice(["auto", "cpu", "cuda"]),
            default="auto",
            show_default=True,
            callback=_device,
            help="auto = CUDA when available.",
        ),
        click.option(
            "--threads",
            "--num-threads",
            "threads",
            cls=HiddenAliasOption,
            type=click.IntRange(min=1),
            default=None,
            help="DALI threads [default: available cores].",
        ),
        on_corrupt_option(),
    )
    for option in reversed(options):  # listed in --help in this order
        command = option(command)
    return command


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1048576"`` -> bytes (binary multiples)."""
    match = _SIZE.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a size; write e.g. 8G, 512M or 1048576")
    value, unit = match.groups()
    return int(float(value) * (1 << (10 * " kmgt".index(unit.lower() or " "))))


def _bytes(ctx: click.Context, param: click.Parameter, value: str) -> int:
    return parse_bytes(value)


def cache_options(command: _Command) -> _Command:
    """The cache's options shared by ``dataplane cache build`` and ``dataplane iterate
    --cache``: ``variants`` (int) and ``max_bytes`` (int, in bytes; written ``8G``,
    ``512M``, ...), the :class:`cache.CacheConfig` fields of the same name."""
    options = (
        click.option(
            "--variants",
            type=click.IntRange(min=1, max=65535),
            default=4,
            show_default=True,
            help="Augmented variants kept per sample; epoch e serves variant e % variants.",
        ),
        click.option(
            "--max-bytes",
            default="8G",
            show_default=True,
            metavar="SIZE",
            callback=_bytes,
            help="Size bound of the cache, e.g. 8G, 512M.",
        ),
    )
    for option in reversed(options):  # listed in --help in this order
        command = option(command)
    return command


def shard_options(command: _Command) -> _Command:
    """``--rank`` and ``--world-size``: the Loader's ``rank`` and ``world_size`` (int or
    None, both or neither; check them with :func:`check_shard`)."""
    options = (
        click.option(
            "--rank",
            type=click.IntRange(min=0),
            default=None,
            help="This process's shard, 0 .. world-size - 1, as a rank of distributed "
            "training iterates it (with --world-size) [default: one shard, every sample].",
        ),
        click.option(
            "--world-size",
            type=click.IntRange(min=1),
            default=None,
            help="Number of shards (distributed processes); give --rank too.",
        ),
    )
    for option in reversed(options):  # listed in --help in this order
        command = option(command)
    return command


def check_shard(rank: int | None, world_size: int | None) -> None:
    """Refuse ``--rank`` without ``--world-size`` (or the reverse) and a rank out of range,
    in the command line's words.

    Raises
    ------
    click.UsageError
        Naming both options and the fix.
    """
    if (rank is None) != (world_size is None):
        raise click.UsageError(
            "give both --rank and --world-size (or neither, for one shard of every sample)"
        )
    if rank is not None and world_size is not None and rank >= world_size:
        raise click.UsageError(
            f"--rank {rank} must be below --world-size {world_size} (ranks count from 0)"
        )


@contextlib.contextmanager
def command_line_warnings() -> Iterator[None]:
    """Within: the data plane's warnings (those of :mod:`dataplane.errors`:
    :class:`~dataplane.CorruptSampleWarning`, :class:`~dataplane.CacheWarning`, ...) are
    printed to stderr as ``Warning: message`` (once each, in the commands' words, no
    Python file or source line); other warnings as Python prints them. Warning filters
    apply as usual (``PYTHONWARNINGS=ignore`` silences them)."""
    with warnings.catch_warnings():
        python_show = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if category.__module__ == _WARNINGS_MODULE:
                click.echo(f"Warning: {cli_message(message)}", err=True)
            else:
                python_show(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield
