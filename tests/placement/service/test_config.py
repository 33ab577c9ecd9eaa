"""The placement service's configuration: the ``placement.*`` keys it knows, the sizes,
durations and numbers it accepts or refuses, its defaults and its warnings."""

from __future__ import annotations

import logging
import math
from typing import Any

import dask
import pytest

from placement.policy import DEFAULT_EXPONENT, OccupancyBasis
from placement.service import LinkConfig, ServiceConfig, ServiceConfigError
from placement.service.config import check_keys, size_in_bytes

MiB = 2**20
CONFIG_LOGGER = "placement.service.config"

#: Every key the module docstring documents, spelt out here rather than read from the
#: module, so that a key missing from the module's list shows.
DOCUMENTED_KEYS = [
    "placement.ssd-dir",
    "placement.hdd-dir",
    "placement.ssd-capacity",
    "placement.model",
    "placement.log-dir",
    "placement.service.sync-interval",
    "placement.service.sync-timeout",
    "placement.service.lease-ttl",
    "placement.service.lease-fraction",
    "placement.service.unknown-size",
    "placement.service.max-backoff",
    "placement.service.occupancy-basis",
    "placement.service.threshold-window",
    "placement.service.threshold-exponent",
]


# ---------------------------------------------------------------------- unknown keys
def test_check_keys_returns_each_unknown_key_dotted_and_with_dashes() -> None:
    settings = {
        "placement.ssd-capacity": "1GiB",
        "placement.service.sync_intervall": "1s",
        "placement.occupancy_basis": "after",
    }
    with dask.config.set(settings):
        assert sorted(check_keys()) == [
            "placement.occupancy-basis",
            "placement.service.sync-intervall",
        ]


def test_every_documented_key_passes_the_check_whatever_its_value() -> None:
    with dask.config.set({key: "x" for key in DOCUMENTED_KEYS}):
        assert check_keys() == []
    # a known key holding a mapping is one setting (refused later as a bad value), not a
    # section whose entries would each be unknown
    for key in DOCUMENTED_KEYS:
        with dask.config.set({key: {"nested": 1}}):
            assert check_keys() == [], key


def test_the_hint_for_a_misspelt_key_names_the_environment_variable_of_the_right_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        dask.config.set({"placement.occupancy_basis": "after"}),
        caplog.at_level(logging.WARNING, CONFIG_LOGGER),
    ):
        check_keys()
    [message] = [r.getMessage() for r in caplog.records]
    assert (
        "did you mean placement.service.occupancy-basis "
        "(DASK_PLACEMENT__SERVICE__OCCUPANCY_BASIS)? " in message
    )


def test_a_worker_link_reports_unknown_placement_keys_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        dask.config.set({"placement.service.sync_intervall": "1s"}),
        caplog.at_level(logging.WARNING, CONFIG_LOGGER),
    ):
        LinkConfig.from_dask_config()
    [message] = [r.getMessage() for r in caplog.records]
    assert "placement.service.sync-intervall" in message and "is ignored" in message


# ---------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2**70 + 1, 2**70 + 1),  # an int is exact however large (no float on the way)
        ("KiB", 1024),  # a unit alone is one of it
        ("MB", 10**6),
        (" 1 GiB ", 2**30),  # spaces anywhere are ignored
        ("2.01GB", 2_010_000_000),  # 2009999999.9999998 as a float: rounded, not truncated
    ],
)
def test_a_size_is_read_as_whole_bytes(value: object, expected: int) -> None:
    nbytes = size_in_bytes("placement.ssd-capacity", value)
    assert nbytes == expected and type(nbytes) is int


@pytest.mark.parametrize("value", [True, False, None, [1], b"1GiB", math.nan])
def test_a_value_that_is_no_size_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ServiceConfigError, match=r"^placement.ssd-capacity=.* is not a size"):
        size_in_bytes("placement.ssd-capacity", value)


@pytest.mark.parametrize("value", [math.inf, "1e400", "1e300TB"])
def test_an_infinite_size_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(
        ServiceConfigError, match=r"^placement.service.unknown-size=.* must be finite$"
    ):
        size_in_bytes("placement.service.unknown-size", value)


# ---------------------------------------------------------------------- durations
@pytest.mark.parametrize("value", [None, b"250ms"])
def test_a_duration_that_is_neither_text_nor_a_number_is_refused_naming_the_key(
    value: object,
) -> None:
    with pytest.raises(
        ServiceConfigError, match=r"^placement.service.sync-interval=.* not a positive duration"
    ):
        LinkConfig(sync_interval_s=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", ["", "1e308w", pytest.param(10**400, id="10**400"), ["1s"], {"s": 1}]
)
def test_a_duration_that_is_empty_overflows_or_is_a_container_is_refused_naming_the_key(
    value: object,
) -> None:
    with pytest.raises(
        ServiceConfigError, match=r"^placement.service.sync-interval=.* not a positive duration"
    ):
        LinkConfig(sync_interval_s=value)  # type: ignore[arg-type]


def test_an_empty_duration_in_dask_config_is_refused_naming_the_key() -> None:
    with (
        dask.config.set({"placement.service.sync-interval": ""}),
        pytest.raises(ServiceConfigError, match=r"^placement.service.sync-interval=''"),
    ):
        LinkConfig.from_dask_config()


def test_an_empty_size_is_refused_not_read_as_one_byte() -> None:
    with pytest.raises(ServiceConfigError, match=r"^placement.ssd-capacity='' is not a size"):
        size_in_bytes("placement.ssd-capacity", "")
    with (
        dask.config.set({"placement.ssd-capacity": " "}),
        pytest.raises(ServiceConfigError, match=r"^placement.ssd-capacity=' ' is not a size"),
    ):
        ServiceConfig.from_dask_config()


# ---------------------------------------------------------------------- policy numbers
@pytest.mark.parametrize(("value", "expected"), [("512", 512), (" 512 ", 512), (512.0, 512)])
def test_a_threshold_window_given_as_text_or_a_whole_float_is_an_int(
    value: object, expected: int
) -> None:
    window = ServiceConfig(ssd_capacity_bytes=MiB, window=value).window  # type: ignore[arg-type]
    assert window == expected and type(window) is int


@pytest.mark.parametrize("value", [True, 0, 2.5])
def test_a_threshold_window_that_is_not_a_positive_whole_number_is_refused(value: object) -> None:
    with pytest.raises(
        ServiceConfigError,
        match=r"^placement.service.threshold-window=.* must be a positive whole number$",
    ):
        ServiceConfig(ssd_capacity_bytes=MiB, window=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, math.inf, 0, pytest.param(10**400, id="10**400")])
def test_a_threshold_exponent_that_is_not_a_positive_finite_number_is_refused(
    value: object,
) -> None:
    with pytest.raises(
        ServiceConfigError, match=r"^placement.service.threshold-exponent=.* must be a positive"
    ):
        ServiceConfig(ssd_capacity_bytes=MiB, exponent=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1, 1.0])
def test_a_lease_may_be_the_whole_budget(value: float) -> None:
    config = ServiceConfig(ssd_capacity_bytes=MiB, lease_fraction=value)
    assert config.max_lease_bytes(8) == MiB


@pytest.mark.parametrize("value", [0, 0.0, "0.5", True])
def test_a_lease_fraction_that_is_no_number_in_zero_to_one_is_refused(value: object) -> None:
    with pytest.raises(
        ServiceConfigError, match=r"^placement.service.lease-fraction=.* must be in \(0, 1\]$"
    ):
        ServiceConfig(ssd_capacity_bytes=MiB, lease_fraction=value)  # type: ignore[arg-type]


def test_a_lease_fraction_in_dask_config_may_be_text() -> None:
    settings = {"placement.ssd-capacity": "1GiB", "placement.service.lease-fraction": "0.25"}
    with dask.config.set(settings):
        config = ServiceConfig.from_dask_config()
    assert config.lease_fraction == 0.25 and config.max_lease_bytes(8) == 2**28


def test_a_lease_fraction_in_dask_config_that_is_no_number_names_the_key() -> None:
    settings = {"placement.ssd-capacity": "1GiB", "placement.service.lease-fraction": "half"}
    with (
        dask.config.set(settings),
        pytest.raises(
            ServiceConfigError,
            match=r"^placement.service.lease-fraction='half' must be a number in \(0, 1\]$",
        ),
    ):
        ServiceConfig.from_dask_config()


@pytest.mark.parametrize("value", [" After ", "AFTER"])
def test_the_occupancy_basis_is_read_whatever_its_case_and_spaces(value: Any) -> None:
    config = ServiceConfig(ssd_capacity_bytes=MiB, occupancy_basis=value)
    assert config.occupancy_basis is OccupancyBasis.AFTER


# ---------------------------------------------------------------------- dask config
def test_an_empty_model_key_means_no_model() -> None:
    with dask.config.set({"placement.ssd-capacity": "1GiB", "placement.model": ""}):
        assert ServiceConfig.from_dask_config().model_path is None


def test_link_config_reads_each_of_its_keys() -> None:
    settings = {
        "placement.service.sync-interval": "20ms",
        "placement.service.sync-timeout": "3s",
        "placement.service.unknown-size": "2MiB",
        "placement.service.max-backoff": "1m",
    }
    with dask.config.set(settings):
        link = LinkConfig.from_dask_config()
    assert link == LinkConfig(
        sync_interval_s=0.02, sync_timeout_s=3.0, unknown_size_bytes=2 * MiB, max_backoff_s=60.0
    )


def test_the_defaults_are_the_documented_ones() -> None:
    assert LinkConfig() == LinkConfig(
        sync_interval_s=0.25, sync_timeout_s=1.0, unknown_size_bytes=4 * MiB, max_backoff_s=30.0
    )
    config = ServiceConfig(ssd_capacity_bytes=MiB)
    assert (config.lease_ttl_s, config.lease_fraction) == (5.0, None)
    assert (config.window, config.exponent) == (4096, DEFAULT_EXPONENT)
    assert config.occupancy_basis is OccupancyBasis.BEFORE
    assert config.max_lease_bytes(4) == MiB // 8
    # with no keys set, Dask config gives the same settings
    with dask.config.set({"placement.ssd-capacity": MiB}):
        assert ServiceConfig.from_dask_config() == config
        assert LinkConfig.from_dask_config() == LinkConfig()


# ---------------------------------------------------------------------- small budgets
@pytest.mark.parametrize("capacity", [MiB, "1MiB"])
def test_a_budget_of_exactly_a_mebibyte_is_not_warned_about(
    capacity: object, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        dask.config.set({"placement.ssd-capacity": capacity}),
        caplog.at_level(logging.WARNING, CONFIG_LOGGER),
    ):
        ServiceConfig.from_dask_config()
    assert caplog.records == []


def test_a_budget_given_as_an_argument_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The warning is for an operator's Dask config; a caller passing 0 means it."""
    with (
        dask.config.set({"placement.ssd-capacity": 1000}),
        caplog.at_level(logging.WARNING, CONFIG_LOGGER),
    ):
        off = ServiceConfig.from_dask_config(ssd_capacity_bytes=0)
        small = ServiceConfig.from_dask_config(ssd_capacity_bytes="1KiB")
    assert (off.ssd_capacity_bytes, small.ssd_capacity_bytes) == (0, 1024)
    assert caplog.records == []
