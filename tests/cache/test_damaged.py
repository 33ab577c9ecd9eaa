"""A damaged ``data.mdb`` (truncated, not an LMDB file, empty, a damaged page, a key of
the wrong length) and a creation cut short: a clear error naming the file and the fix,
never a crash; a rebuild starts the cache anew and deletes nothing else in its directory.

The files are real LMDB caches, damaged by the tests as a failing disk, a full disk
or a careless copy would. Opening a truncated file used to kill the process
(``SIGBUS``), so that open runs in a child process: a regression fails the test
instead of ending the test run.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import cache
from cache import CacheConfig, CacheError, CacheStore, StoreState, verify
from tests.cache import helpers

REPO = Path(__file__).resolve().parents[2]
#: The fix every message of a damaged cache names.
FIX = (
    r"Rebuild it: CacheConfig\('[^']*', rebuild=True\), or `dataplane cache build --rebuild "
    r"\.\.\.`, or `dataplane cache clear [^`]*`; or delete the directory"
)


def _config(path: Path, **options: object) -> CacheConfig:
    return CacheConfig(path, variants=2, max_bytes=64 << 20, **options)  # type: ignore[arg-type]


def _built(path: Path) -> Path:
    """A complete cache of 512 samples x 2 variants (about 1.7 MiB), closed."""
    with CacheStore(_config(path), helpers.identity()) as store:
        idx = np.arange(helpers.NUM_SAMPLES)
        for variant in (0, 1):
            store.put_batch(idx, variant, helpers.images(idx, variant), helpers.labels(idx))
    return path


def _died(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


_OPEN_TRUNCATED = """
import json, sys
import numpy as np
from cache import CacheConfig, CacheError, CacheStore, verify
from cache.maintenance import reset_cache
from tests.cache import helpers

path = sys.argv[1]
config = CacheConfig(path, variants=2, max_bytes=64 << 20)
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except CacheError as exc:
        out[name] = [type(exc).__name__, str(exc)]

attempt("open_existing", lambda: CacheStore.open_existing(path).info())
attempt("open", lambda: CacheStore(config, helpers.identity()).counts())
attempt("reset", lambda: reset_cache(path))
store = CacheStore(CacheConfig(path, variants=2, max_bytes=64 << 20, rebuild=True),
                   helpers.identity())
out["rebuilt_count"] = store.count()
idx = np.arange(64)
out["written"] = store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
store.close()
with CacheStore.open_existing(path) as again:
    out["verified"] = verify(again).ok
print(json.dumps(out))
"""


def test_a_truncated_data_file_is_refused_before_any_page_is_read(tmp_path: Path) -> None:
    path = _built(tmp_path / "c")
    (path / "notes.txt").write_text("kept")
    half = (path / "data.mdb").stat().st_size // 2
    os.truncate(path / "data.mdb", half)
    proc = subprocess.run(
        [sys.executable, "-c", _OPEN_TRUNCATED, str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"the child died ({_died(proc.returncode)}): {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    truncated = re.compile(
        rf"the cache at {re.escape(str(path))} is damaged \(its data.mdb is truncated: {half} "
        rf"bytes of (\d+)\)\. {FIX}$"
    )
    for name in ("open_existing", "open", "reset"):
        assert out[name] is not None, f"{name}: no error"
        kind, message = out[name]
        match = truncated.match(message)
        assert kind == "DamagedCacheError" and match, f"{name}: {kind}: {message}"
        assert int(match.group(1)) > half
    # rebuild=True starts it anew: its data.mdb and lock.mdb, nothing else
    assert (out["rebuilt_count"], out["written"], out["verified"]) == (0, 64, 64)
    assert (path / "notes.txt").read_text() == "kept"


def test_a_damaged_page_is_named_with_the_fix_and_a_rebuild_starts_anew(tmp_path: Path) -> None:
    path = _built(tmp_path / "c")
    assert helpers.damage_record_pages(path, 300, 0)
    damaged = rf"the cache at {re.escape(str(path))} is damaged \(.*MDB_(CORRUPTED|PAGE_NOTFOUND)"
    out = np.zeros((2, *helpers.SHAPE), np.uint8)
    with CacheStore.open_existing(path) as store:
        with pytest.raises(CacheError, match=rf"{damaged}.*\)\. {FIX}$") as info:
            store.info()
        assert isinstance(info.value, cache.DamagedCacheError)
        assert info.value.path == str(path)
        with pytest.raises(CacheError, match=damaged):
            store.completed(0)
        with pytest.raises(CacheError, match=damaged):
            store.get_batch([300, 301], 0, out)
        report = verify(store, repair=True)
    assert report.damaged is not None and re.match(damaged, report.damaged), report.damaged
    assert not report.clean and report.repaired == 0
    assert report.as_dict()["damaged"] == report.damaged
    with CacheStore(_config(path), helpers.identity()) as store:  # a write meets the damage
        idx = np.array([300, 301])
        with pytest.raises(CacheError, match=damaged):
            store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
        assert store.state is StoreState.FAILED
    with CacheStore(_config(path, rebuild=True), helpers.identity()) as store:
        assert store.count() == 0
        idx = np.arange(helpers.NUM_SAMPLES)
        assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == idx.size
        assert verify(store).clean
        assert helpers.check_batch(store, idx, 0) == idx.size


def _put_raw(path: Path, key: bytes, value: bytes) -> None:
    """Write ``key: value`` into the records of the closed cache at ``path`` with LMDB
    itself, as another program writing into the file, or a damaged node, would."""
    import lmdb

    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    try:
        records = env.open_db(b"records", create=False)
        with env.begin(write=True, db=records) as txn:
            txn.put(key, value)
    finally:
        env.close()


@pytest.mark.parametrize("fix", ["rebuild", "clear"])
def test_a_key_of_the_wrong_length_is_damage_named_with_the_fix(tmp_path: Path, fix: str) -> None:
    from dataplane.cache_cli import cache_group

    path = _built(tmp_path / "c")
    # 7 bytes: it sorts among variant 0's keys, just before index 256's.
    bad = b"\0" * 6 + b"\x01"
    _put_raw(path, bad, b"x" * 100)
    damaged = (
        rf"the cache at {re.escape(str(path))} is damaged \(a record key of 7 bytes, not 8: "
        rf"{bad.hex()}\)\. {FIX}$"
    )
    stored = 2 * helpers.NUM_SAMPLES + 1
    idx = np.arange(helpers.NUM_SAMPLES)
    with CacheStore.open_existing(path) as store:
        for read in (store.info, store.counts, lambda: store.completed(0)):
            with pytest.raises(cache.DamagedCacheError, match=damaged) as info:
                read()
            assert info.value.path == str(path)
        report = verify(store, repair=True)
        assert report.damaged is not None and re.match(damaged, report.damaged), report.damaged
        assert not report.clean and report.repaired == 0
        # Nothing stored is lost: every record is kept, and the intact ones still serve.
        assert store.count() == stored
        assert helpers.check_batch(store, idx, 1) == idx.size
    if fix == "clear":  # its tree is intact: its records are cleared, its files kept
        result = CliRunner().invoke(cache_group, ["clear", "--yes", "--json", str(path)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["deleted"] == stored
    with CacheStore(_config(path, rebuild=fix == "rebuild"), helpers.identity()) as store:
        assert store.count() == 0
        assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == idx.size
        assert verify(store).clean
        assert store.completed(0).all()


def _invalidate(data: Path, damage: str) -> None:
    page = mmap.PAGESIZE  # LMDB's page size
    if damage == "meta page":
        helpers.flip(data, page)  # its second meta page
    elif damage == "one page":  # what a full disk leaves of a creation
        os.truncate(data, page)
    else:
        os.truncate(data, 0)


@pytest.mark.parametrize("damage", ["meta page", "one page", "empty"])
def test_an_invalid_or_empty_data_file_is_named_and_a_rebuild_starts_anew(
    tmp_path: Path, damage: str
) -> None:
    path = _built(tmp_path / "c")
    (path / "notes.txt").write_text("kept")
    _invalidate(path / "data.mdb", damage)
    what = (
        "its data.mdb is empty: 0 bytes, not a complete LMDB file"
        if damage == "empty"
        else "its data.mdb is not a valid or complete LMDB file: .*MDB_INVALID"
    )
    expected = rf"the cache at {re.escape(str(path))} is damaged \({what}.*\)\. {FIX}$"
    with pytest.raises(CacheError, match=expected):
        CacheStore.open_existing(path)
    if damage != "empty":  # (an empty data.mdb where a cache is made becomes one)
        with pytest.raises(CacheError, match=expected):
            CacheStore(_config(path), helpers.identity())
    with CacheStore(_config(path, rebuild=True), helpers.identity()) as store:
        assert store.count() == 0
        idx = np.arange(32)
        assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == 32
    with CacheStore.open_existing(path) as store:
        assert verify(store).ok == 32
    assert sorted(p.name for p in path.iterdir()) == ["data.mdb", "lock.mdb", "notes.txt"]


@pytest.mark.parametrize("damage", ["meta page", "empty", "page"])
def test_cache_clear_starts_a_damaged_cache_anew(tmp_path: Path, damage: str) -> None:
    from dataplane.cache_cli import cache_group

    path = _built(tmp_path / "c")
    (path / "notes.txt").write_text("kept")
    if damage == "page":
        helpers.damage_record_pages(path, 300, 0)
    else:
        _invalidate(path / "data.mdb", damage)
    runner = CliRunner()
    refused = runner.invoke(cache_group, ["clear", str(path)], input="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output, refused.output
    assert (path / "data.mdb").exists(), "nothing is deleted without a yes"
    result = runner.invoke(cache_group, ["clear", "--yes", "--json", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["metadata_deleted"] or damage == "page"
    if doc.get("files_deleted"):  # the records could not be cleared: the files are deleted
        assert doc["files_deleted"] == ["data.mdb", "lock.mdb"] and doc["deleted"] is None
        assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]
    else:  # a damaged leaf is freed with the rest when the tree above it is intact
        assert damage == "page" and doc["deleted"] == 2 * helpers.NUM_SAMPLES
    with CacheStore(_config(path), helpers.identity()) as store:  # and it fills again
        assert store.count() == 0
        idx = np.arange(32)
        assert store.put_batch(idx, 1, helpers.images(idx, 1), helpers.labels(idx)) == 32
        assert verify(store).clean
    assert (path / "notes.txt").read_text() == "kept"


_CREATE_CUT_SHORT = """
import json, resource, signal, sys
from cache import CacheConfig, CacheError, CacheStore
from tests.cache import helpers

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# Real: a file may not grow beyond 4 KiB, so LMDB writes half of its two meta pages.
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    CacheStore(CacheConfig(sys.argv[1], variants=1, max_readers=8), helpers.identity()).close()
    print(json.dumps({"error": None}))
except CacheError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def test_a_creation_cut_short_leaves_no_invalid_data_file(tmp_path: Path) -> None:
    path = tmp_path / "c"
    proc = subprocess.run(
        [sys.executable, "-c", _CREATE_CUT_SHORT, str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"the child died ({_died(proc.returncode)}): {proc.stderr[-3000:]}"
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert error is not None and f"the cache at {path}" in error and "space" in error, error
    assert not (path / "data.mdb").exists(), "the incomplete data.mdb it created is deleted"
    with CacheStore(_config(path), helpers.identity()) as store:  # the next creation works
        idx = np.arange(32)
        assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == 32
