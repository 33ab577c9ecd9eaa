"""``verify``: per-variant counts, corrupt records found and deleted (API and command)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from cache import CacheStore, verify
from cache.record import HEADER_SIZE, pack_key
from tests.cache import helpers

Opener = Callable[..., CacheStore]


def _fill(open_store: Opener) -> None:
    """64 records of variant 0 and 32 of variant 1, then closed."""
    with open_store(variants=2) as store:
        for variant, n in ((0, 64), (1, 32)):
            idx = np.arange(n)
            store.put_batch(idx, variant, helpers.images(idx, variant), helpers.labels(idx))


def _flip_payload_byte(path: Path, index: int, variant: int) -> None:
    """Invert one payload byte of the record of ``(index, variant)`` with LMDB itself (no
    environment of ``path`` may be open in this process): a bit flip the checksum catches."""
    import lmdb

    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    try:
        records = env.open_db(b"records", create=False)
        with env.begin(write=True, db=records) as txn:
            key = pack_key(index, variant)
            value = bytearray(txn.get(key))
            value[HEADER_SIZE + 100] ^= 0xFF
            txn.put(key, bytes(value))
    finally:
        env.close()


def test_verify_counts_valid_records_per_variant(open_store: Opener, tmp_path: Path) -> None:
    _fill(open_store)
    with CacheStore.open_existing(tmp_path / "cache") as store:
        report = verify(store)
    assert report.clean
    assert (report.checked, report.ok) == (96, 96)
    assert report.counts == {0: 64, 1: 32}
    assert report.expected == 2 * helpers.NUM_SAMPLES
    assert report.as_dict()["counts"] == {"0": 64, "1": 32}


def test_verify_repair_deletes_a_corrupt_record_and_only_it(
    open_store: Opener, tmp_path: Path
) -> None:
    path = tmp_path / "cache"
    _fill(open_store)
    _flip_payload_byte(path, 10, 1)
    with CacheStore.open_existing(path) as store:
        found = verify(store)
        assert found.corrupt == [(10, 1)] and not found.clean
        assert (found.checked, found.ok, found.repaired) == (96, 95, 0)
        assert found.counts == {0: 64, 1: 31}
        assert store.count() == 96, "without repair nothing is deleted"

        repaired = verify(store, repair=True)
        assert repaired.corrupt == [(10, 1)]
        assert repaired.repaired == 1
        assert repaired.counts == {0: 64, 1: 31}
        assert store.count() == 95
        assert store.counts() == {0: 64, 1: 31}

        again = verify(store)
        assert again.clean and again.corrupt == []
        assert (again.checked, again.ok, again.repaired) == (95, 95, 0)
        assert again.counts == {0: 64, 1: 31}
        # the intact records still serve; the deleted one is a miss (produced fresh)
        assert helpers.check_batch(store, np.arange(32), 1) == 31
        assert helpers.check_batch(store, np.arange(64), 0) == 64


def test_verify_command_reports_and_repairs_a_corrupt_record(
    open_store: Opener, tmp_path: Path
) -> None:
    from dataplane.cache_cli import cache_group

    path = tmp_path / "cache"
    _fill(open_store)
    _flip_payload_byte(path, 5, 0)
    runner = CliRunner()

    checked = runner.invoke(cache_group, ["verify", "--no-progress", str(path)])
    assert checked.exit_code == 1 and isinstance(checked.exception, SystemExit), checked.output
    assert "checked    96 records: 95 ok, 1 corrupt" in checked.output
    assert "per variant 0: 63, 1: 32" in checked.output
    assert "corrupt    index 5 variant 0" in checked.output
    assert "fix        run again with --repair to delete them" in checked.output

    repaired = runner.invoke(
        cache_group, ["verify", "--repair", "--json", "--no-progress", str(path)]
    )
    # the corrupt record was found, so this run is not clean; it deleted it
    assert repaired.exit_code == 1, repaired.output
    doc = json.loads(repaired.output)
    assert doc["corrupt"] == [[5, 0]] and doc["repaired"] == 1 and not doc["clean"]
    assert doc["counts"] == {"0": 63, "1": 32}

    clean = runner.invoke(cache_group, ["verify", "--no-progress", str(path)])
    assert clean.exit_code == 0, clean.output
    assert "checked    95 records: 95 ok, 0 corrupt" in clean.output
    assert "per variant 0: 63, 1: 32" in clean.output
    with CacheStore.open_existing(path) as store:
        assert store.counts() == {0: 63, 1: 32}


def test_verify_command_says_how_many_it_deleted(open_store: Opener, tmp_path: Path) -> None:
    from dataplane.cache_cli import cache_group

    path = tmp_path / "cache"
    _fill(open_store)
    _flip_payload_byte(path, 3, 0)
    _flip_payload_byte(path, 7, 1)
    result = CliRunner().invoke(cache_group, ["verify", "--repair", "--no-progress", str(path)])
    assert result.exit_code == 1, result.output
    assert "checked    96 records: 94 ok, 2 corrupt" in result.output
    assert "repaired   2 deleted; they are refilled when next needed" in result.output
    with CacheStore.open_existing(path) as store:
        assert store.count() == 94
        assert verify(store).clean
