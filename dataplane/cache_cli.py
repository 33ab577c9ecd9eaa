"""The ``dataplane cache`` commands: ``info``, ``verify``, ``clear``, ``build``.

Each prints human-readable text, or one JSON document with ``--json``. Errors
of the cache (:class:`cache.CacheError`) exit with status 1 and their message.
``verify`` exits with status 1 when it finds corrupt records or a damaged file.

A damaged cache (:class:`cache.DamagedCacheError`: ``data.mdb`` truncated, not a
valid LMDB file, a damaged page) is named with its fix by every command; ``clear``
and ``build --rebuild`` start it anew when its records cannot be cleared, deleting
its ``data.mdb`` and ``lock.mdb`` (nothing else in the directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cache import (
    CacheConfig,
    CacheError,
    CacheStore,
    DamagedCacheError,
    FillMode,
    StoreState,
    UnreadableMetaError,
    verify,
)
from cache.maintenance import remove_damaged, reset_cache
from dataplane.loader_cli import cache_options, command_line_warnings, loader_options

if TYPE_CHECKING:
    from dataplane.loader import Loader


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _open(path: Path) -> CacheStore:
    try:
        return CacheStore.open_existing(path)
    except CacheError as exc:
        raise click.ClickException(str(exc)) from exc


def _unused_line(path: Path, unused: dict[int, int]) -> str:
    """The ``unused`` line of ``info`` and ``build``: records outside the metadata."""
    total = sum(unused.values())
    if len(unused) <= 4:
        where = ", ".join(f"variant {v}: {n}" for v, n in sorted(unused.items()))
    else:
        where = f"variants {min(unused)}..{max(unused)}"
    return (
        f"unused       {total} records outside the metadata ({where}), left from a run with "
        f"more variants: never served but counted in bytes; `dataplane cache verify --repair "
        f"{path}` deletes them"
    )


def _emit(as_json: bool, doc: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(doc, indent=2, default=str) if as_json else text)


@click.group("cache")
def cache_group() -> None:
    """Inspect, verify, clear and build augmented-sample caches."""


@cache_group.command("info")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def info_command(path: Path, as_json: bool) -> None:
    """Recipe and dataset, records per variant, bytes and whether the cache is full.

    The recipe and the dataset are shown in words (name and parameters; kind,
    location, samples and file totals) with their fingerprints, as a stale
    cache's message names them; a cache written without descriptions shows its
    fingerprints.

    Counts the variants in use (``0 .. variants - 1``); records outside the metadata
    (variants left from a run with more variants) are counted apart as unused.
    """
    with _open(path) as store:
        try:
            info = store.info()
        except CacheError as exc:
            raise click.ClickException(str(exc)) from exc
    doc = info.as_dict()
    ident = info.meta.identity
    lines = [
        f"cache        {info.path}",
        f"created      {info.meta.created} (schema {info.meta.schema_version})",
        f"recipe       {ident.describe_recipe()}",
        f"dataset      {ident.describe_dataset()}",
        f"samples      {ident.num_samples} x {info.meta.variants} variants, "
        f"{info.meta.dtype} {info.meta.layout} {tuple(ident.sample_shape)}",
    ]
    for variant, count in sorted(info.counts.items()):
        pct = 100.0 * count / ident.num_samples
        lines.append(f"variant {variant:<4} {count} / {ident.num_samples} ({pct:.1f}%)")
    lines.append(f"records      {info.records} / {info.expected_records}")
    if info.unused:
        lines.append(_unused_line(path, info.unused))
    lines += [
        f"bytes        {_human(info.used_bytes)} used, {_human(info.file_bytes)} file, "
        f"max {_human(info.max_bytes)}",
        f"per sample   {_human(info.bytes_per_sample)} "
        f"(payload {_human(info.meta.payload_size)})",
        f"full         {'yes' if info.full else 'no'}",
    ]
    _emit(as_json, doc, "\n".join(lines))


@cache_group.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--repair",
    is_flag=True,
    help="Delete corrupt records (they are refilled) and records outside the metadata.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def verify_command(path: Path, repair: bool, as_json: bool, progress: bool) -> None:
    """Check every record's checksum; exit status 1 when corrupt records are found.

    Records outside the metadata (variants left from a run with more variants)
    are reported as unused; ``--repair`` deletes them along with corrupt ones.
    A damaged file (a page LMDB cannot read) stops the check: it is reported with
    the fix, nothing is repaired, and the exit status is 1.
    """
    from tqdm import tqdm

    with _open(path) as store:
        try:
            total = store.count()
            with tqdm(
                total=total, unit="rec", desc="verify", disable=not progress, leave=False
            ) as bar:
                report = verify(store, repair=repair, progress=bar.update)
        except CacheError as exc:
            raise click.ClickException(str(exc)) from exc
    lines = [
        f"cache      {report.path}",
        f"checked    {report.checked} records: {report.ok} ok, {len(report.corrupt)} corrupt",
        "per variant " + ", ".join(f"{v}: {n}" for v, n in sorted(report.counts.items())),
        f"complete   {report.ok} / {report.expected}",
    ]
    if report.out_of_range:
        lines.append(
            f"unused     {len(report.out_of_range)} records outside the metadata (never served)"
            + (
                f": {report.dropped_unused} deleted"
                if repair
                else "; run again with --repair to delete them"
            )
        )
    for index, variant in report.corrupt[:20]:
        lines.append(f"corrupt    index {index} variant {variant}")
    if len(report.corrupt) > 20:
        lines.append(f"corrupt    ... and {len(report.corrupt) - 20} more (see --json)")
    if report.damaged is not None:
        lines.append(f"damaged    {report.damaged}")
        if repair:
            lines.append("repaired   nothing: deleting records cannot mend a damaged file")
    elif report.corrupt:
        lines.append(
            f"repaired   {report.repaired} deleted; they are refilled when next needed"
            if repair
            else "fix        run again with --repair to delete them (they are never served)"
        )
    _emit(as_json, report.as_dict(), "\n".join(lines))
    if not report.clean:
        raise SystemExit(1)


@cache_group.command("clear")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def clear_command(path: Path, yes: bool, as_json: bool) -> None:
    """Delete every record of a cache (its metadata stays; pages are reused).

    A cache whose metadata is unreadable loses its metadata too; the next run
    writes it again. A damaged cache (truncated or invalid ``data.mdb``, a damaged
    page) whose records cannot be cleared loses its ``data.mdb`` and ``lock.mdb``
    (nothing else in the directory); the next build or run creates it anew.
    """
    unreadable: UnreadableMetaError | None = None
    damage: DamagedCacheError | None = None
    store: CacheStore | None = None
    try:
        store = CacheStore.open_existing(path)
    except UnreadableMetaError as exc:
        unreadable = exc
    except DamagedCacheError as exc:
        damage = exc
    except CacheError as exc:
        raise click.ClickException(str(exc)) from exc
    deleted: int | None = None
    try:
        if store is not None:
            with store:
                count = store.count()
                if not yes:
                    click.confirm(f"delete all {count} records of the cache at {path}?", abort=True)
                deleted = store.clear()
            what = "deleted (the file keeps its size; delete the directory to free the disk space)"
        elif unreadable is not None:
            if not yes:
                click.confirm(
                    f"{unreadable}\ndelete all records and the metadata of the cache at {path}?",
                    abort=True,
                )
            deleted = reset_cache(path)
            what = "and the unreadable metadata deleted (the next run writes new metadata)"
    except DamagedCacheError as exc:  # its records cannot be cleared
        damage = exc
    except CacheError as exc:
        raise click.ClickException(str(exc)) from exc
    removed: list[str] = []
    if damage is not None:
        if not yes:
            click.confirm(
                f"{damage}\ndelete the data.mdb and lock.mdb of the cache at {path} (nothing "
                "else)?",
                abort=True,
            )
        try:
            removed = remove_damaged(path)
        except CacheError as exc:
            raise click.ClickException(str(exc)) from exc
        deleted = None
        text = (
            f"cleared {path}: the damaged cache's {' and '.join(removed) or 'files'} deleted "
            "(the next build or run creates the cache anew)"
        )
    else:
        text = f"cleared {path}: {deleted} records {what}"
    _emit(
        as_json,
        {
            "path": str(path),
            "deleted": deleted,
            "metadata_deleted": store is None or damage is not None,
            "files_deleted": removed,
        },
        text,
    )


# -- build: fill ahead of time through the loader's own fill path -----------------------
@cache_group.command("build")
@click.argument("data", type=click.Path(exists=True, path_type=Path))
@click.argument("path", type=click.Path(path_type=Path))
@loader_options
@cache_options
@click.option("--rebuild", is_flag=True, help="Clear a stale or existing cache first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def build_command(
    data: Path,
    path: Path,
    recipe: str,
    size: int | None,
    channels: int | None,
    batch_size: int,
    seed: int,
    device: str | None,
    threads: int | None,
    on_corrupt: str,
    variants: int,
    max_bytes: int,
    rebuild: bool,
    as_json: bool,
    progress: bool,
) -> None:
    """Fill the cache of DATA ahead of time: every variant of every sample.

    Iterates ``Loader(DATA, cache=CacheConfig(PATH, variants=V, fill="inline"),
    normalize=False)`` over each epoch v in 0..V-1 whose variant v still misses
    samples (epoch v serves variant v), and discards the batches: the loader
    serves what the cache holds and produces (DALI) and writes only the missing
    samples, so building again after a crash finishes what is missing and
    nothing more. Stops early when the cache stops admitting (``--max-bytes``
    reached, or a write failed: exit status 1). A cache that cannot be written
    (read-only directory or file system) while samples are missing builds
    nothing and exits with status 1; so does a damaged cache (``--rebuild``
    starts it anew).

    Counts: ``written`` records written by this build; ``produced`` samples
    produced fresh (the missing ones); ``images_per_second`` is ``produced``
    per second of the build. The progress bar counts the missing samples.

    The output names the recipe and the dataset as ``dataplane cache info`` does.
    A cache built for another recipe or dataset is refused with the loader's
    message (what changed, old and new); ``--rebuild`` clears it first.

    Fewer ``--variants`` than the cache was built with keep the records of the
    others, unused: the output says so (``variants_change`` with ``--json``), and
    ``dataplane cache verify --repair`` deletes them.

    The loader's options (``--recipe`` ... ``--on-corrupt``) are those of ``dataplane
    iterate``. With ``--on-corrupt skip`` corrupt images are skipped (never cached; a
    warning names them) instead of stopping the build.
    """
    import warnings

    from dataplane import CacheWarning, DataplaneError, Loader
    from dataplane.errors import cli_message

    try:
        config = CacheConfig(
            path,
            variants=variants,
            max_bytes=max_bytes,
            rebuild=rebuild,
            fill=FillMode.INLINE,
        )
    except CacheError as exc:
        raise click.BadParameter(str(exc)) from exc
    with command_line_warnings():
        # The build reports what the loader would warn about (unusable, full, failed).
        warnings.filterwarnings("ignore", category=CacheWarning)
        try:
            loader = Loader(
                data,
                batch_size=batch_size,
                recipe=recipe,
                size=size,
                channels=channels,
                shuffle=False,
                seed=seed,
                device=device,
                num_threads=threads,
                on_corrupt=on_corrupt,
                cache=config,
                normalize=False,
            )
        except DataplaneError as exc:
            raise click.ClickException(cli_message(exc)) from exc
        store = loader.cache_store
        change = store.variants_change if store is not None else None
        try:
            written, produced, todo, seconds, error = _fill(
                loader, variants, progress=progress and not as_json
            )
            info = loader.cache_store.info()
        except (DataplaneError, CacheError) as exc:  # (a cache damaged where the build read)
            raise click.ClickException(cli_message(exc)) from exc
        finally:
            loader.close()
    doc = {
        **info.as_dict(),
        "built_variants": todo,
        "written": written,
        "produced": produced,
        "seconds": seconds,
        "images_per_second": produced / seconds if seconds > 0 else 0.0,
        "error": error,
        "variants_change": change.as_dict() if change is not None else None,
    }
    lines = [
        f"built {path}: {written} records written in {seconds:.1f} s "
        f"({doc['images_per_second']:.0f} images/s produced)",
        f"records {info.records} / {info.expected_records}, {_human(info.used_bytes)} used"
        + (" (full: the rest is served fresh)" if info.full else ""),
        f"recipe  {info.meta.identity.describe_recipe()}",
        f"dataset {info.meta.identity.describe_dataset()}",
    ]
    if change is not None and change.unused:
        lines.append(f"variants changed: {change.message}")
    elif info.unused:
        lines.append(_unused_line(path, info.unused))
    if error is not None:
        lines.append(f"stopped: {error}")
    _emit(as_json, doc, "\n".join(lines))
    if error is not None:
        raise SystemExit(1)


def _read_only_message(path: Path, missing: dict[int, Any], todo: list[int]) -> str:
    """Why a build of ``path`` cannot write, what it leaves missing, and the fix."""
    try:
        mounted_read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        mounted_read_only = False
    why = (
        "the file system holding it is mounted read-only"
        if mounted_read_only
        else "this user may not write its directory"
    )
    count = sum(int(missing[v].sum()) for v in todo)
    which = f"variant {todo[0]}" if len(todo) == 1 else f"variants {', '.join(map(str, todo))}"
    return (
        f"the cache at {path} is read-only ({why}): nothing was built, and {count} samples "
        f"of {which} are still missing. Make it writable, or build into another path"
    )


def _fill(
    loader: Loader, variants: int, *, progress: bool
) -> tuple[int, int, list[int], float, str | None]:
    """Iterate ``loader`` (built with ``cache=``) over the epochs whose variant misses samples.

    Returns
    -------
    tuple
        ``(records written, samples produced fresh, variants built, seconds, error)``;
        ``error`` is why filling stopped (a write failed, the cache became
        unreadable), or None.

    Raises
    ------
    click.ClickException
        The cache cannot be opened, is read-only while samples are missing (nothing is
        built), or cannot be read (a damaged page).
    DataplaneError
        From the loader (an unreadable sample, a pipeline failure).
    """
    import time

    from tqdm import tqdm

    cache = loader.cache_side  # its filler's counts and errors
    store = loader.cache_store
    if cache is None or store is None:
        reason = (cache.disabled if cache is not None else None) or "it cannot be opened"
        raise click.ClickException(reason.removeprefix("the cache is not used: "))
    filler = cache.filler
    try:
        missing = {v: ~store.completed(v) for v in range(variants)}
    except CacheError as exc:  # e.g. a damaged page: the message names the fix
        raise click.ClickException(str(exc)) from exc
    todo = [v for v in range(variants) if missing[v].any()]
    if todo and store.state is StoreState.READ_ONLY:
        raise click.ClickException(_read_only_message(store.path, missing, todo))
    produced = 0
    start = time.perf_counter()
    with tqdm(
        total=int(sum(int(missing[v].sum()) for v in todo)),
        unit="img",
        desc="build",
        disable=not progress,
    ) as bar:
        for variant in todo:
            if not (cache.enabled and filler.admitting):
                break
            loader.set_epoch(variant)
            batches = iter(loader)
            try:
                for _, indices in zip(batches, loader.plan.batches(variant), strict=False):
                    bar.update(int(missing[variant][indices].sum()))
                    if not (cache.enabled and filler.admitting):
                        break
            finally:
                batches.close()
            if loader.cache_stats is not None:
                produced += loader.cache_stats.fresh
    seconds = time.perf_counter() - start
    if filler.error is not None:
        error: str | None = str(filler.error)
    elif cache.disabled is not None:
        error = cache.disabled
    else:
        error = None
    return filler.stats.written, produced, todo, seconds, error
