"""Smoke run of ``benchmarks/cache.py --quick`` (real DALI, real LMDB, real data).

It checks that the benchmark runs end to end and reports what it should; it
never asserts on time (the machines are shared).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from benchmarks.cache import main


def test_quick_run_reports_every_measurement(
    tmp_path: Path, fmnist_dir: Path, opencv_jpegs: list[Path]
) -> None:
    result = CliRunner().invoke(
        main, ["--quick", "--cache-root", str(tmp_path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "cached >= 10x fresh at 224" in result.output
    assert "fill overhead <= 10%" in result.output
    doc = json.loads((tmp_path / "out" / "cache-latest.json").read_text())
    for name in ("opencv-doc JPEG 224", "fashion-mnist PNG 28"):
        entry = doc["datasets"][name]
        for key in (
            "fresh_images_per_second",
            "fill_images_per_second",
            "cached_images_per_second",
            "get_batch_images_per_second",
            "raw_lmdb_images_per_second",
        ):
            assert entry[key] > 0, key
        assert entry["dali_imported"] is False, "the serving process never imports DALI"
        cache = entry["cache"]
        assert cache["records"] == cache["expected_records"]
        assert entry["hits"] == cache["records"]  # one round over every variant, all hits
        assert len(entry["memory_after_each_epoch"]) == entry["variants"]
