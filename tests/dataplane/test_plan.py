"""The epoch plan: order, shards, last-batch policies and resume (pure logic)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dataplane.plan import EpochPlan, LastBatchPolicy

policies = st.sampled_from(list(LastBatchPolicy))


def plans_for(n: int, b: int, w: int, policy: LastBatchPolicy, seed: int, shuffle: bool = True):
    return [EpochPlan(n, b, shuffle, seed, r, w, policy) for r in range(w)]


@given(
    n=st.integers(1, 300),
    b=st.integers(1, 40),
    w=st.integers(1, 5),
    policy=policies,
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 1000),
)
@settings(max_examples=300, deadline=None)
def test_shards_equal_batch_counts_disjoint_and_complete(
    n: int, b: int, w: int, policy: LastBatchPolicy, seed: int, epoch: int
) -> None:
    plans = plans_for(n, b, w, policy, seed)
    lengths = {len(p) for p in plans}
    assert len(lengths) == 1, "every rank must have the same number of batches"
    (length,) = lengths
    per_rank = [list(p.batches(epoch)) for p in plans]
    assert all(len(batches) == length for batches in per_rank)
    assert all(len(batch) > 0 for batches in per_rank for batch in batches)
    assert all(len(batch) <= b for batches in per_rank for batch in batches)
    used = Counter(int(i) for batches in per_rank for batch in batches for i in batch)
    round_size = w * b
    if policy is LastBatchPolicy.DROP:
        assert length == n // round_size
        assert all(c == 1 for c in used.values()), "DROP shards are disjoint"
        assert sum(used.values()) == length * round_size
        assert n - len(used) < round_size, "DROP leaves out fewer than one round"
    else:
        assert length == -(-n // round_size)
        assert set(used) == set(range(n)), "shards together are complete"
        if policy is LastBatchPolicy.PAD:
            assert all(len(batch) == b for batches in per_rank for batch in batches)
            assert sum(used.values()) == length * round_size
        else:
            remaining = n - (length - 1) * round_size
            repeats = max(0, w - remaining)
            assert sum(used.values()) == n + repeats
            last_sizes = [len(batches[-1]) for batches in per_rank]
            assert max(last_sizes) - min(last_sizes) <= 1
            if remaining >= w:
                assert all(c == 1 for c in used.values()), "PARTIAL shards are disjoint"


@given(n=st.integers(1, 200), seed=st.integers(0, 2**32), epoch=st.integers(0, 100))
@settings(max_examples=100, deadline=None)
def test_order_is_a_permutation_fixed_by_seed_and_epoch(n: int, seed: int, epoch: int) -> None:
    plan = EpochPlan(n, 7, shuffle=True, seed=seed)
    order = plan.order(epoch)
    assert sorted(order.tolist()) == list(range(n))
    again = EpochPlan(n, 13, shuffle=True, seed=seed, rank=0, world_size=1).order(epoch)
    np.testing.assert_array_equal(order, again)


@given(n=st.integers(20, 500), seed=st.integers(0, 2**32), epoch=st.integers(0, 100))
@settings(max_examples=100, deadline=None)
def test_order_differs_between_epochs(n: int, seed: int, epoch: int) -> None:
    plan = EpochPlan(n, 4, shuffle=True, seed=seed)
    assert not np.array_equal(plan.order(epoch), plan.order(epoch + 1))


def test_no_shuffle_is_dataset_order() -> None:
    plan = EpochPlan(10, 4, shuffle=False)
    np.testing.assert_array_equal(plan.shard(3), np.arange(10))


@given(
    n=st.integers(1, 200),
    b=st.integers(1, 30),
    w=st.integers(1, 4),
    policy=policies,
    seed=st.integers(0, 1000),
    data=st.data(),
)
@settings(max_examples=150, deadline=None)
def test_resume_yields_exactly_the_remaining_batches(
    n: int, b: int, w: int, policy: LastBatchPolicy, seed: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, w - 1))
    plan = EpochPlan(n, b, True, seed, rank, w, policy)
    assume(len(plan) > 0)
    start = data.draw(st.integers(0, len(plan)))
    full = list(plan.batches(5))
    rest = list(plan.batches(5, start=start))
    assert len(rest) == len(full) - start
    for a, c in zip(full[start:], rest, strict=True):
        np.testing.assert_array_equal(a, c)


def sizes(plan: EpochPlan) -> list[int]:
    return [len(batch) for batch in plan.batches(0)]


@pytest.mark.parametrize(
    ("policy", "world_size", "expected"),
    [
        # The worked table of dataplane.plan's docstring (N = 10, batch_size = 4).
        (LastBatchPolicy.DROP, 1, [[4, 4]]),
        (LastBatchPolicy.PARTIAL, 1, [[4, 4, 2]]),
        (LastBatchPolicy.PAD, 1, [[4, 4, 4]]),
        (LastBatchPolicy.DROP, 2, [[4], [4]]),
        (LastBatchPolicy.PARTIAL, 2, [[4, 1], [4, 1]]),
        (LastBatchPolicy.PAD, 2, [[4, 4], [4, 4]]),
    ],
)
def test_documented_worked_table(
    policy: LastBatchPolicy, world_size: int, expected: list[list[int]]
) -> None:
    plans = [EpochPlan(10, 4, False, 0, r, world_size, policy) for r in range(world_size)]
    assert [sizes(p) for p in plans] == expected
    if policy is LastBatchPolicy.PAD and world_size == 1:
        np.testing.assert_array_equal(plans[0].batch(0, 2), [8, 9, 0, 1])
    if policy is LastBatchPolicy.PAD and world_size == 2:
        np.testing.assert_array_equal(plans[0].batch(0, 1), [8, 9, 0, 1])
        np.testing.assert_array_equal(plans[1].batch(0, 1), [2, 3, 4, 5])


def test_partial_with_fewer_remaining_samples_than_ranks_repeats_instead_of_empty() -> None:
    plans = [EpochPlan(13, 4, False, 0, r, 3, LastBatchPolicy.PARTIAL) for r in range(3)]
    last = [p.batch(0, len(p) - 1).tolist() for p in plans]
    assert last == [[12], [0], [1]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_samples": 0, "batch_size": 1},
        {"num_samples": 5, "batch_size": 0},
        {"num_samples": 5, "batch_size": 1, "rank": 2, "world_size": 2},
    ],
)
def test_invalid_plans_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        EpochPlan(**kwargs)


def test_invalid_plans_raise_the_packages_config_error() -> None:
    from dataplane.errors import ConfigError, DataplaneError

    with pytest.raises(DataplaneError, match="num_samples must be positive, got 0") as info:
        EpochPlan(num_samples=0, batch_size=1)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(DataplaneError, match=r"need 0 <= seed < 2\*\*48"):
        EpochPlan(num_samples=5, batch_size=1, seed=-1)
