"""Disk full and unwritable paths: clear errors, serving goes on, nothing stored is lost."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb
import numpy as np
import pytest

import cache.env
from cache import CacheConfig, CacheError, CacheFiller, CacheStore, StoreState, verify
from tests.cache import helpers

Opener = Callable[..., CacheStore]
REPO = Path(__file__).resolve().parents[2]


def _enospc(txn: lmdb.Transaction) -> None:
    txn.abort()
    raise lmdb.Error("mdb_txn_commit: No space left on device")


def test_disk_full_on_write_is_a_clear_error_and_serving_goes_on(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    idx = np.arange(32)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    monkeypatch.setattr(cache.env, "_commit", _enospc)  # fault injection: ENOSPC at commit
    more = np.arange(32, 64)
    with pytest.raises(
        CacheError, match="No space left on device.*keeps serving the 32 records.*free disk space"
    ):
        store.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more))
    assert store.state is StoreState.FAILED
    assert store.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more)) == 0
    assert helpers.check_batch(store, np.arange(64), 0) == 32  # existing cache still valid
    monkeypatch.undo()
    with CacheStore.open_existing(store.path) as again:
        assert verify(again).ok == 32


def test_disk_full_in_the_background_filler_never_reaches_training(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    monkeypatch.setattr(cache.env, "_commit", _enospc)
    filler = CacheFiller(store)
    idx = np.arange(8)
    with caplog.at_level(logging.DEBUG, logger="cache.fill"):
        assert filler.submit(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
        filler.flush()
    assert isinstance(filler.error, CacheError)
    assert "cache filling stopped" in caplog.text and "No space left" in caplog.text
    # Reported once, from filler.error (the loader's CacheWarning), not as a WARNING too.
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "cache.fill")
    assert filler.submit(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) is False
    filler.close()
    assert store.count() == 0


def test_a_failing_writer_thread_never_hangs_flush_or_close(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(txn: lmdb.Transaction) -> None:  # fault injection: an unexpected bug
        txn.abort()
        raise RuntimeError("unexpected")

    store = open_store()
    monkeypatch.setattr(cache.env, "_commit", broken)
    filler = CacheFiller(store, queue_batches=1)
    idx = np.arange(8)
    with caplog.at_level(logging.DEBUG, logger="cache.fill"):
        for _ in range(5):
            filler.submit(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
        assert filler.flush(timeout=30)
    assert isinstance(filler.error, CacheError)
    assert "RuntimeError('unexpected')" in str(filler.error)
    assert not filler.admitting
    filler.close()  # returns: the thread is still draining its queue
    assert "the writer failed" in caplog.text and "RuntimeError: unexpected" in caplog.text
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "cache.fill")


_FSIZE_CHILD = """
import json, resource, signal, sys
import numpy as np
from cache import CacheConfig, CacheError, CacheStore, verify
from tests.cache import helpers
path, limit = sys.argv[1], int(sys.argv[2])
shape = (3, 64, 64)
store = CacheStore(CacheConfig(path, variants=1, max_bytes=1 << 30), helpers.identity(shape=shape))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # real: writes past it fail (EFBIG)
written, error = helpers.fill_until_error(store, 512, 16)
served = helpers.check_batch(store, np.arange(512), 0)
print(json.dumps({"written": written, "error": error, "state": store.state.value,
                  "served": served}))
"""


def test_real_file_size_limit_during_fill(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, str(tmp_path / "c"), str(2 << 20)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["error"] is not None and "writing to the cache" in result["error"]
    assert result["state"] == "failed"
    assert 0 < result["written"] < 512
    assert result["served"] == result["written"]  # the process keeps serving what it has
    with CacheStore.open_existing(tmp_path / "c") as store:
        report = verify(store)
    assert report.clean and report.ok == result["written"]


@pytest.fixture
def world_readable_dir() -> Iterator[Path]:
    """A temporary directory another user may traverse (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="dataplane-cache-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(path)


def _as_unprivileged(fn: Callable[[], dict]) -> dict:
    """Run ``fn`` in a forked child that cannot bypass file permissions."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)  # drops root's capabilities: permissions now apply
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - report everything to the parent
            result = {"crash": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_read_only_directory(world_readable_dir: Path) -> None:
    path = world_readable_dir / "cache"
    with CacheStore(CacheConfig(path, variants=2, max_bytes=16 << 20), helpers.identity()) as store:
        idx = np.arange(20)
        store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    for p in (path, *path.iterdir()):
        p.chmod(0o555 if p.is_dir() else 0o444)
    world_readable_dir.chmod(0o555)

    def child() -> dict:
        out: dict = {}
        try:
            CacheStore(
                CacheConfig(world_readable_dir / "new", max_bytes=16 << 20), helpers.identity()
            )
        except CacheError as exc:
            out["new_error"] = str(exc)
        store = CacheStore(CacheConfig(path, variants=2, max_bytes=16 << 20), helpers.identity())
        out["state"] = store.state.value
        out["served"] = helpers.check_batch(store, np.arange(40), 0)
        more = np.arange(20, 30)
        out["written"] = store.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more))
        return out

    result = _as_unprivileged(child)
    assert "crash" not in result, result
    assert "cannot create the cache directory" in result["new_error"]
    assert "Permission denied" in result["new_error"] and "writable path" in result["new_error"]
    assert result["state"] == "read-only"
    assert result["served"] == 20 and result["written"] == 0


def test_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CacheError, match="exists and is not a directory"):
        CacheStore(CacheConfig(tmp_path / "f"), helpers.identity())
    with pytest.raises(CacheError, match="no cache at"):
        CacheStore.open_existing(tmp_path / "missing")


# -- a full disk is called full --------------------------------------------------------
class _Statvfs:
    """What ``os.statvfs`` says of a file system with ``free`` bytes left."""

    def __init__(self, free: int) -> None:
        self.f_frsize = 4096
        self.f_bavail = free // 4096
        self.f_flag = 0


def _eio(txn: lmdb.Transaction) -> None:
    txn.abort()
    raise lmdb.Error("mdb_txn_commit: Input/output error")  # LMDB's report of a short write


def test_an_io_error_on_a_full_disk_says_the_disk_is_full(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    idx = np.arange(32)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    monkeypatch.setattr(cache.env, "_commit", _eio)  # fault injection: the write fails...
    monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(12288))  # ...on a full disk
    more = np.arange(32, 64)
    with pytest.raises(CacheError) as info:
        store.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more))
    assert str(info.value) == (
        f"writing to the cache at {store.path} failed: the disk holding {store.path} is full "
        "(12288 bytes free; mdb_txn_commit: Input/output error); it stops admitting new "
        "samples and keeps serving the 32 records it holds; free disk space, then reopen it "
        "to fill again"
    )
    assert store.state is StoreState.FAILED
    monkeypatch.undo()
    assert helpers.check_batch(store, np.arange(64), 0) == 32  # nothing lost


def test_an_io_error_with_room_to_spare_stays_an_io_error(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    monkeypatch.setattr(cache.env, "_commit", _eio)
    monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(1 << 40))
    idx = np.arange(32)
    with pytest.raises(CacheError) as info:
        store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    assert "failed (mdb_txn_commit: Input/output error)" in str(info.value)
    assert "is full" not in str(info.value) and "check the disk and permissions" in str(info.value)


def test_creating_a_cache_on_a_full_disk_is_an_error_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c"
    monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(8192))
    with pytest.raises(
        CacheError,
        match=rf"cannot create the cache at {path}: the disk holding {path} is full \(8192 bytes "
        r"free, \d+ needed\); free disk space or choose another path",
    ):
        CacheStore(CacheConfig(path, max_bytes=16 << 20), helpers.identity())
    assert not (path / "data.mdb").exists() and not (path / "lock.mdb").exists()


_FILL_A_SMALL_DISK = """
import json, sys
import numpy as np
from cache import CacheConfig, CacheError, CacheStore, verify
from tests.cache import helpers

root, shape = sys.argv[1], (3, 64, 64)  # 12 KiB records: 512 of them do not fit in 2 MiB
store = CacheStore(CacheConfig(root + "/c", variants=1, max_bytes=64 << 20),
                   helpers.identity(shape=shape))
written, error = helpers.fill_until_error(store, 512, 32)
out = {"written": written, "error": error, "state": store.state.value,
       "served": helpers.check_batch(store, np.arange(512), 0)}
store.close()
try:  # a new cache on the full disk
    CacheStore(CacheConfig(root + "/new", variants=1), helpers.identity()).close()
    out["created"] = None
except CacheError as exc:
    out["created"] = str(exc)
print(json.dumps(out))
"""

#: Runs its arguments in a private mount namespace on a fresh tmpfs of ``$1`` at ``$0``.
_ON_A_TMPFS = 'mount -t tmpfs -o size="$1" tmpfs "$0" && shift && exec "$@"'


def _on_a_tmpfs(where: Path, size: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _ON_A_TMPFS,
         str(where), size, *command],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )


def test_a_real_full_disk_is_called_full(tmp_path: Path) -> None:
    """On a real 2 MiB tmpfs (a private mount: root only): LMDB's EIO is called a full
    disk, what was committed is served, and a new cache there is an error, not a crash."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounting a tmpfs needs root and unshare")
    root = tmp_path / "small"
    root.mkdir()
    probe = _on_a_tmpfs(root, "1m", "true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.strip()}")
    proc = _on_a_tmpfs(root, "2m", sys.executable, "-c", _FILL_A_SMALL_DISK, str(root))
    assert proc.returncode == 0, f"the child failed ({proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] is not None, out
    assert re.search(
        rf"writing to the cache at {root}/c failed: the disk holding {root}/c is full \(\d+ "
        r"bytes free; .*\); it stops admitting .*; free disk space", out["error"]
    ), out["error"]
    assert out["state"] == "failed" and 0 < out["written"] < 512
    assert out["served"] == out["written"]  # nothing committed is lost
    assert out["created"] is not None and f"the disk holding {root}/new is full" in out["created"]
