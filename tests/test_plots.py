"""Block and KL plots: run order on every point, a zero-based or visibly broken y axis, a KL legend that counts
positions (not ECDF step points) and sits off the curves."""

from __future__ import annotations

import math
from pathlib import Path

from frankenstein.report.plots import kl_figure, paired_blocks_figure, plot_paired_blocks, run_positions

ORDERS = [["served", "candidate"], ["candidate", "served"], ["candidate", "served", "served", "candidate"]]


def labels(fig) -> dict[tuple[float, float], str]:
    return {(round(a.xy[0], 2), a.xy[1]): a.get_text() for ax in fig.axes for a in ax.texts}


def test_every_point_says_when_its_arm_ran() -> None:
    fig = paired_blocks_figure(["1", "2", "3"], [3.0, 9.0, 4.0], [1.0, 8.0, None], "verify_step_ms", "t", orders=ORDERS)
    assert labels(fig) == {
        (-0.12, 3.0): "1st",
        (0.12, 1.0): "2nd",
        (0.88, 9.0): "2nd",
        (1.12, 8.0): "1st",
        (1.88, 4.0): "2nd+3rd",  # two starts per arm: both positions; the missing candidate value gets no label
    }
    assert run_positions(["candidate"] * 12, "candidate").endswith("11th+12th")
    assert "when each arm ran" in fig.axes[0].get_xlabel()


def test_axis_starts_at_zero_or_is_drawn_broken() -> None:
    spread = paired_blocks_figure(["1", "2"], [3.0, 9.0], [1.0, 8.0], "m", "t", orders=ORDERS)
    assert len(spread.axes) == 1 and spread.axes[0].get_ylim()[0] == 0
    close = paired_blocks_figure(["1", "2"], [100.0, 101.0], [99.0, 100.5], "m", "t", orders=ORDERS)
    top, base = close.axes
    assert base.get_ylim()[0] == 0 and list(base.get_yticks()) == [0]  # the zero is on the page
    assert top.get_ylim()[0] > 90  # the data keep their resolution above the break
    marks = [ln for ax in (top, base) for ln in ax.lines if ln.get_linestyle() == "None"]
    assert len(marks) == 2  # the break is drawn on both sides


def test_odd_inputs_still_draw(tmp_path: Path) -> None:
    assert paired_blocks_figure(["1", "2", "3"], [None, None, None], [None, None, None], "m", "t", orders=[])
    assert paired_blocks_figure(["1"], [0.0], [0.0], "m", "t")  # no orders, all zero: zero-based, no crash
    p = plot_paired_blocks(tmp_path / "x.png", ["1", "2"], [2.0, math.nan], [1.0, 1.5], "m", "t", orders=ORDERS[:1])
    assert p.read_bytes().startswith(b"\x89PNG")


def test_kl_legend_counts_positions_and_sits_off_the_curve() -> None:
    cand = [i / 960 for i in range(96)]
    noise = [0.0] * 95 + [math.nan]  # a NaN is no position
    fig = kl_figure(cand, noise, tolerance=0.05, threshold=0.5)
    [legend] = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:2] == ["noise floor (served vs served), 95 positions", "candidate vs served, 96 positions"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
