"""One style per policy, shared by every plot that draws policies."""

from __future__ import annotations

import numpy as np

from placement.cost import CostModel
from placement.simulator import Trace, policy_roster
from placement.style import POLICY_STYLES, SPARE_COLORS, UPPER_BOUND, PolicyStyle, policy_styles
from tests.placement.logtables import make_log


def test_every_policy_evaluate_draws_has_a_colour_of_its_own() -> None:
    trace = Trace.from_table(make_log(pipelines=2, runs=2, files_per_stage=2))
    nothing = np.full(len(trace), np.nan)
    extra = {"lightgbm-per-workload": nothing, "threshold+true-density": nothing}
    roster = policy_roster(
        trace, CostModel(), stage_history=nothing, lightgbm=nothing, extra=extra, break_even=False
    )
    names = [name for name, _, _ in roster] + [UPPER_BOUND]
    assert set(names) <= set(POLICY_STYLES)
    colours = [style.color for style in POLICY_STYLES.values()]
    assert len(set(colours)) == len(colours)
    assert not set(SPARE_COLORS) & set(colours)
    assert policy_styles(names) == {name: POLICY_STYLES[name] for name in names}


def test_a_policy_the_mapping_does_not_name_gets_a_spare_style() -> None:
    names = ["lightgbm", "mine", "lightgbm", "theirs", *(f"p{i}" for i in range(5))]
    styles = policy_styles(names)
    assert list(styles) == list(dict.fromkeys(names))
    assert styles["lightgbm"] == POLICY_STYLES["lightgbm"]
    assert (styles["mine"].color, styles["theirs"].color) == SPARE_COLORS[:2]
    looks = [(s.color, s.linestyle) for s in styles.values()]
    assert len(set(looks)) == len(looks)


def test_a_style_draws_as_matplotlib_keywords() -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        (line,) = ax.plot([1, 2], [3, 4], **POLICY_STYLES["oracle"].kwargs())
        (dots,) = ax.plot([1, 2], [3, 4], **PolicyStyle("#123456", "o", ":", 3.0).kwargs())
    finally:
        plt.close(fig)
    assert (line.get_linestyle(), line.get_marker(), line.get_color()) == ("--", "None", "#000000")
    assert (dots.get_linestyle(), dots.get_marker(), dots.get_linewidth()) == (":", "o", 3.0)
