"""CacheConfig and CacheIdentity validate at construction, naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache import CacheConfig, CacheConfigError, CacheError, CacheIdentity, FillMode


def test_defaults_and_coercion(tmp_path: Path) -> None:
    config = CacheConfig(str(tmp_path / "c"))
    assert config.path == tmp_path / "c"
    assert (config.variants, config.max_bytes, config.rebuild) == (4, 8 << 30, False)
    assert CacheConfig(tmp_path, fill="off").fill is FillMode.OFF


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"variants": 0}, "variants must be >= 1"),
        ({"variants": 2.0}, "variants must be an int"),
        ({"variants": 1 << 16}, "variants must be <= 65535"),
        ({"max_bytes": 1000}, "max_bytes must be >= 1048576"),
        ({"max_bytes": True}, "max_bytes must be an int"),
        ({"rebuild": "yes"}, "rebuild must be True or False"),
        ({"fill": "sometimes"}, "fill must be one of 'background', 'inline', 'off'"),
        ({"fill_queue": 0}, "fill_queue must be >= 1"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict, match: str) -> None:
    with pytest.raises(CacheConfigError, match=match):
        CacheConfig(tmp_path, **options)


def test_bad_path_and_positional_options(tmp_path: Path) -> None:
    with pytest.raises(CacheConfigError, match="path must be a str or os.PathLike"):
        CacheConfig(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CacheConfig(tmp_path, 4)  # type: ignore[misc]  # options are keyword-only


def test_identity_validation() -> None:
    with pytest.raises(CacheError, match="sample_shape must be a tuple of positive ints"):
        CacheIdentity("r", "d", (3, 0, 4), 10)
    with pytest.raises(CacheError, match="num_samples must be a positive int"):
        CacheIdentity("r", "d", (3, 4, 4), 0)
    with pytest.raises(CacheError, match="fingerprint must be a str or a mapping"):
        CacheIdentity(3, "d", (3, 4, 4), 10)  # type: ignore[arg-type]
