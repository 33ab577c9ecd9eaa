"""The cost model: per-file TCO on each tier, break-even density, optional terms, validation."""

from __future__ import annotations

import numpy as np
import pytest

from placement.cost import (
    GB,
    SECONDS_PER_MONTH,
    CostModel,
    budget_share,
    budgets_from_percents,
    focus_budget_index,
    prices_changed,
    prices_text,
    with_prices,
)
from placement.errors import PlacementConfigError, PlacementError


def test_defaults_price_a_file_by_hand() -> None:
    c = CostModel()
    size, life, ops = 1e9, SECONDS_PER_MONTH, 10.0  # 1 GB for a month, 10 operations
    assert c.ssd_cost(size, life) == pytest.approx(0.08)
    drive_time = 10 * (300 / (60 * SECONDS_PER_MONTH)) / 170
    assert c.hdd_cost(size, life, ops) == pytest.approx(max(0.045, drive_time))
    assert c.hdd_cost(size, life, ops) == pytest.approx(0.045)  # capacity dominates: few ops
    busy = 1e9 * 170 * 60 * SECONDS_PER_MONTH / 300  # ops that make drive time 1000x capacity
    assert c.hdd_cost(size, life, busy) == pytest.approx(busy * c.hdd_usd_per_op)


def test_break_even_density_separates_savers_from_losers() -> None:
    c = CostModel()
    d = c.break_even_density()
    size, life = 1e6, 10.0
    for factor, sign in ((4.0, 1), (0.25, -1)):
        ops = factor * d * size * life
        assert np.sign(c.saving(size, life, ops)) == sign


def test_costs_broadcast_over_arrays() -> None:
    c = CostModel()
    out = c.saving(np.array([1e6, 2e6]), np.array([1.0, 1.0]), np.array([2.0, 2.0]))
    assert out.shape == (2,) and (out > 0).all() and out[0] > out[1]


def test_optional_terms_add_wear_and_transfer() -> None:
    base = CostModel()
    full = CostModel(ssd_usd_per_tb_written=0.06, hdd_bytes_per_s=250e6)
    size, life, ops = 5e6, 1.0, 2.0
    assert full.ssd_cost(size, life, 5e6) == pytest.approx(
        base.ssd_cost(size, life) + 5e6 * 0.06 / 1e12
    )
    transfer = 1e7 / 250e6 * base.hdd_drive_usd / (base.hdd_amortization_months * SECONDS_PER_MONTH)
    assert full.hdd_cost(size, life, ops, 1e7) == pytest.approx(
        base.hdd_cost(size, life, ops) + transfer
    )
    # a large write-once, read-once file loses money on SSD once wear is priced
    assert base.saving(size, life, ops) > 0 > full.saving(size, life, ops, 1e7, 5e6)


@pytest.mark.parametrize(
    "bad",
    [
        {"ssd_usd_per_gb_month": 0},
        {"hdd_iops_per_drive": -1},
        {"hdd_drive_usd": float("nan")},
        {"ssd_usd_per_tb_written": -0.1},
        {"hdd_bytes_per_s": 0},
        {"hdd_amortization_months": True},
    ],
)
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        CostModel(**bad)


def test_to_dict_round_trips() -> None:
    c = CostModel(ssd_usd_per_gb_month=0.1)
    assert CostModel(**c.to_dict()) == c
    assert c.ssd_usd_per_byte_second == pytest.approx(0.1 / GB / SECONDS_PER_MONTH)


def test_break_even_density_with_wear_depends_on_lifetime_and_matches_saving() -> None:
    full = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    size = 1e6
    lives = np.array([0.01, 0.1, 1.0, 10.0, 1000.0])
    d = full.break_even_density(lives)
    assert (np.diff(d) < 0).all()  # a longer life spreads the wear: a lower bar
    for life, de in zip(lives, d, strict=True):
        for factor, sign in ((1.5, 1), (1 / 1.5, -1)):
            ops = factor * de * size * life
            saving = full.saving(size, life, ops, io_bytes=2 * size, write_bytes=size)
            assert np.sign(saving) == sign
    # without optional terms the lifetime does not matter
    base = CostModel()
    assert base.break_even_density(lives) == pytest.approx(base.break_even_density())
    assert not base.prices_lifetime and full.prices_lifetime
    # an HDD dearer per byte-second than the SSD: every file saves
    assert CostModel(hdd_usd_per_gb_month=0.1).break_even_density() == 0.0
    assert CostModel(hdd_usd_per_gb_month=0.1).break_even_density(1.0) == 0.0
    with pytest.raises(ValueError, match="write_bytes_per_byte"):
        full.break_even_density(1.0, write_bytes_per_byte=-1)


def test_focus_budget_is_five_percent_else_the_middle_budget() -> None:
    assert focus_budget_index((0.01, 0.02, 0.05, 0.10, 0.20)) == 2
    assert focus_budget_index([0.2, 0.05]) == 1
    assert focus_budget_index((0.01, 0.02, 0.10)) == 1
    assert focus_budget_index((0.01, 0.10)) == 1
    assert focus_budget_index((0.3,)) == 0
    with pytest.raises(ValueError, match="no budgets"):
        focus_budget_index(())


def test_validation_names_the_allowed_range_of_each_field() -> None:
    """Wear may be 0 (left out), so its message says >= 0; the other prices say > 0."""
    with pytest.raises(PlacementConfigError, match=r"ssd_usd_per_tb_written=-1 must be >= 0$"):
        CostModel(ssd_usd_per_tb_written=-1)
    with pytest.raises(PlacementConfigError, match=r"hdd_iops_per_drive=0 must be > 0$"):
        CostModel(hdd_iops_per_drive=0)
    with pytest.raises(PlacementConfigError, match=r"hdd_bytes_per_s=-1.0 must be > 0$"):
        CostModel(hdd_bytes_per_s=-1.0)
    with pytest.raises(PlacementConfigError, match="finite number"):
        CostModel(hdd_drive_usd=True)
    assert CostModel(ssd_usd_per_tb_written=0).ssd_usd_per_tb_written == 0


def test_break_even_density_rejects_lifetimes_that_are_not_positive() -> None:
    full = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    for bad in (-1.0, 0.0, -1e-3, float("nan"), [1.0, -2.0], np.array([np.nan, 1.0])):
        with pytest.raises(PlacementConfigError, match="lifetime_s=.* must be seconds > 0"):
            full.break_even_density(bad)
        with pytest.raises(ValueError, match="lifetime_s="):
            CostModel().break_even_density(bad)
    assert full.break_even_density(float("inf")) == pytest.approx(full.break_even_density())
    assert full.break_even_density(1e-3) > 0


def test_cost_errors_are_placement_errors() -> None:
    for make in (
        lambda: CostModel(hdd_iops_per_drive=0),
        lambda: CostModel().break_even_density(write_bytes_per_byte=-1),
        lambda: budgets_from_percents("200"),
        lambda: budgets_from_percents("x"),
        lambda: budgets_from_percents(""),
        lambda: budget_share("0"),
        lambda: budget_share("5GiB"),
        lambda: focus_budget_index(()),
    ):
        with pytest.raises(PlacementError) as info:
            make()
        assert isinstance(info.value, ValueError)


def test_budget_share_reads_a_percent_with_or_without_its_sign() -> None:
    for text in ("5", "5%", " 5 % ", "5.0"):
        assert budget_share(text) == pytest.approx(0.05)
    assert budgets_from_percents("1, 2%,5") == pytest.approx((0.01, 0.02, 0.05))
    with pytest.raises(PlacementError, match=r"101% is not in \(0, 100\]; fix it"):
        budget_share("101", hint="fix it")
    with pytest.raises(PlacementError, match="'2GiB' is not a number"):
        budget_share("2GiB")


def test_with_prices_changes_the_named_fields_only() -> None:
    model = with_prices(["ssd-usd-per-gb-month=0.10", "hdd_iops_per_drive = 200"])
    assert model.ssd_usd_per_gb_month == 0.10 and model.hdd_iops_per_drive == 200
    assert model.hdd_usd_per_gb_month == CostModel().hdd_usd_per_gb_month
    assert prices_changed(model) == {"ssd_usd_per_gb_month": 0.10, "hdd_iops_per_drive": 200}
    assert prices_text(model) == (
        "prices: ssd_usd_per_gb_month=0.1, hdd_iops_per_drive=200; the rest defaults"
    )
    assert prices_changed(with_prices([])) == {}
    assert prices_text(CostModel()).startswith("prices: defaults")
    # a later item for the same field wins; transfer time can be priced and unpriced
    assert with_prices(["hdd_drive_usd=1", "hdd_drive_usd=2"]).hdd_drive_usd == 2
    priced = with_prices(["hdd_bytes_per_s=270e6"])
    assert priced.hdd_bytes_per_s == 270e6
    assert with_prices(["hdd_bytes_per_s=none"], priced).hdd_bytes_per_s is None


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("ssd_usd_per_gb_month", "is not NAME=VALUE"),
        ("=1", "is not NAME=VALUE"),
        ("ssd_usd_per_gb=0.1", "did you mean ssd_usd_per_gb_month?"),
        ("hdd_iops_per_drive=many", "is not a number; give it in operations per second, e.g."),
        ("hdd_iops_per_drive=0", "must be > 0"),
        ("ssd_usd_per_gb_month=inf", "must be a finite number"),
    ],
)
def test_with_prices_refuses_bad_items_naming_them(item: str, message: str) -> None:
    with pytest.raises(PlacementConfigError, match=message):
        with_prices([item])


def test_a_month_is_a_twelfth_of_a_julian_year() -> None:
    # 365.25 days * 86400 s / 12 = 2_629_800 s
    assert SECONDS_PER_MONTH == 2_629_800
    assert CostModel().ssd_cost(GB, 2_629_800) == pytest.approx(0.08)  # 1 GB for a month


def test_wear_alone_or_transfer_alone_makes_the_break_even_depend_on_lifetime() -> None:
    wear, transfer = CostModel(ssd_usd_per_tb_written=0.057), CostModel(hdd_bytes_per_s=270e6)
    assert wear.prices_lifetime and transfer.prices_lifetime
    assert wear.break_even_density(0.1) > wear.break_even_density(10.0)


def test_equal_capacity_prices_make_every_file_save() -> None:
    """An HDD byte-second as dear as an SSD's (c_h >= c_s): the break-even density is 0."""
    same = CostModel(hdd_usd_per_gb_month=0.08)
    assert same.hdd_usd_per_byte_second == same.ssd_usd_per_byte_second
    assert same.break_even_density() == 0.0
    assert same.break_even_density(1.0) == 0.0
    assert same.saving(1e6, 1.0, 0.0) >= 0  # no operations at all: it still breaks even


def test_break_even_density_weighs_writes_and_reads_by_their_own_ratios() -> None:
    full = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    size, life = 1e6, 1.0
    for a, r in ((3.0, 0.5), (0.5, 3.0)):
        d = full.break_even_density(life, write_bytes_per_byte=a, read_bytes_per_byte=r)
        for factor, sign in ((1.5, 1), (1 / 1.5, -1)):
            ops = factor * d * size * life
            saving = full.saving(size, life, ops, io_bytes=(a + r) * size, write_bytes=a * size)
            assert np.sign(saving) == sign


def test_a_file_whose_transfer_alone_outweighs_its_ssd_capacity_saves_at_any_density() -> None:
    """Transfer priced, no wear, a short life: the break-even density is 0, never negative."""
    transfer = CostModel(hdd_bytes_per_s=270e6)
    size, life = 1e6, 1e-3
    # q = 300 / (60 * 2_629_800) / 270e6 = 7.0e-15 $/byte; (a + r) * q / life = 1.4e-11
    # $/byte-second of HDD transfer against c_s = 0.08 / 1e9 / 2_629_800 = 3.0e-17 of SSD
    assert transfer.saving(size, life, 0.0, io_bytes=2 * size, write_bytes=size) > 0
    assert transfer.break_even_density(life) == 0.0
    assert (transfer.break_even_density(np.array([life, 1.0])) == 0.0).all()


def test_budgets_may_be_the_whole_peak_and_skip_empty_items() -> None:
    assert budget_share("100") == 1.0 and budget_share("100%") == 1.0
    assert budgets_from_percents("1, 5,") == pytest.approx((0.01, 0.05))  # a trailing comma


def test_with_prices_keeps_the_base_prices_it_does_not_name() -> None:
    base = CostModel(ssd_usd_per_gb_month=0.1, hdd_bytes_per_s=270e6)
    model = with_prices(["hdd_drive_usd=400"], base)
    assert model.hdd_drive_usd == 400
    assert model.ssd_usd_per_gb_month == 0.1 and model.hdd_bytes_per_s == 270e6
    assert with_prices(["hdd_bytes_per_s="], base).hdd_bytes_per_s is None  # empty: not priced


def test_a_price_set_to_its_default_is_not_reported_as_changed() -> None:
    model = with_prices(["hdd_usd_per_gb_month=0.045", "hdd_drive_usd=400"])
    assert prices_changed(model) == {"hdd_drive_usd": 400.0}
    assert prices_text(with_prices(["hdd_usd_per_gb_month=0.045"])).startswith("prices: defaults")


def test_a_file_that_rewrites_its_bytes_pays_for_its_wear_even_on_a_dear_hdd() -> None:
    """HDD capacity dearer than SSD's, but not dear enough to cover three writes of wear."""
    wear = CostModel(hdd_usd_per_gb_month=0.1, ssd_usd_per_tb_written=0.057)
    size, life, a = 1e6, 1e4, 3.0
    # c_h - c_s = 0.02 / 1e9 / 2_629_800 = 7.6e-18 $/byte-s lies between w / life = 5.7e-18
    # and a * w / life = 1.7e-17 (w = 0.057 / 1e12 $/byte written)
    d = wear.break_even_density(life, write_bytes_per_byte=a, read_bytes_per_byte=0.0)
    assert d > 0
    for factor, sign in ((1.5, 1), (1 / 1.5, -1)):
        ops = factor * d * size * life
        assert np.sign(wear.saving(size, life, ops, write_bytes=a * size)) == sign
