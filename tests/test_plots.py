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
    # post_ms (or a pre_ms block whose clocks disagree) can be at or below zero: it stays on the page
    signed = paired_blocks_figure(["1", "2"], [-2.0, 1.0], [-3.5, 0.5], "post_ms", "t", orders=ORDERS)
    (ax,) = signed.axes
    assert ax.get_ylim()[0] < -3.5 and ax.get_ylim()[1] > 1.0


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
    assert texts[:2] == [  # positions at zero are drawn at the log axis's left edge, and counted
        "noise floor (served vs served), 95 positions, 95 at or below 1e-05",
        "candidate vs served, 96 positions, 1 at or below 1e-05",
    ]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_block_plot_labels_come_from_the_recorded_starts_not_the_schedule(tmp_path: Path) -> None:
    """A block whose starts were recorded in another order than registered (a resumed or retried block: the
    second slot ran first): the note's block plot labels it as it ran (``started_at``, then start id)."""
    from frankenstein.design.registry import register
    from frankenstein.report import write_report
    from frankenstein.report.note import run_orders

    from helpers_campaign import make_campaign, make_workload, write_design
    from helpers_ledger import CONFIRMED

    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = register(camp, write_design(camp.root / "d.toml", name="d", blocks=6))
    served, cand = CONFIRMED
    out_of_order = {0, 3}  # blocks 1 and 4: the second slot ran (and was written) first
    for b, order in enumerate(reg.schedule):
        slots = list(enumerate(order))
        if b in out_of_order:
            slots.reverse()
        for minute, (pos, arm) in enumerate(slots):
            camp.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at=f"2025-03-01T10:{b:02d}:{minute * 30:02d}.000Z",
                metrics={"verify_step_ms": served[b] if arm == "served" else cand[b], "tokens_per_step": 1.0},
                engine="llamacpp",
            )
    ran = run_orders(camp.store.starts_of(reg.design_id), 6)
    want = [list(o) for o in reg.schedule]
    want[0] = list(reversed(want[0]))
    want[3] = [want[3][1], want[3][0]]
    assert ran == want and ran != [list(o) for o in reg.schedule]

    note_png = write_report(camp, tmp_path / "out").parent / f"{reg.design_id}-blocks.png"
    blocks = [str(b + 1) for b in range(6)]
    title = f"{reg.design_id}: verify_step_ms per block"
    label = "verify_step_ms (ms)"  # the note's y label: the metric and its unit from the metric registry
    as_run = plot_paired_blocks(tmp_path / "as-run.png", blocks, served, cand, label, title, orders=ran)
    as_scheduled = plot_paired_blocks(
        tmp_path / "as-scheduled.png", blocks, served, cand, label, title, orders=reg.schedule
    )
    assert note_png.read_bytes() == as_run.read_bytes()  # the note drew the recorded order ...
    assert note_png.read_bytes() != as_scheduled.read_bytes()  # ... not the registered one
    fig = paired_blocks_figure(blocks, served, cand, label, title, orders=ran)
    got = labels(fig)
    for b in out_of_order:
        assert got[(round(b - 0.12, 2), served[b])] == run_positions(ran[b], "served")
        assert run_positions(ran[b], "served") != run_positions(reg.schedule[b], "served")
    camp.close()


def test_run_orders_keep_every_recorded_start_in_time_then_id_order() -> None:
    from frankenstein.report.note import run_orders
    from frankenstein.store import StartRow

    def row(i: int, block: int, arm: str, at: str, status: str = "ok") -> StartRow:
        return StartRow(i, "d", block, 0, arm, 0, status, None, at, at, None, None, None, {}, {}, {})

    rows = [
        row(1, 0, "candidate", "2025-03-01T10:00:30.000Z"),
        row(2, 0, "served", "2025-03-01T10:00:00.000Z", status="failed"),  # ran first, failed: still ran first
        row(4, 1, "served", "2025-03-01T10:01:00.000Z"),
        row(3, 1, "candidate", "2025-03-01T10:01:00.000Z"),  # the same second: the one written first
        row(5, 7, "served", "2025-03-01T10:07:00.000Z"),  # outside the registered blocks: ignored
    ]
    assert run_orders(rows, 3) == [["served", "candidate"], ["candidate", "served"], []]
