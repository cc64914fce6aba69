"""PNG plots for the progress note (matplotlib, Agg canvas; no pyplot, so no global state or display).

    plot_paired_blocks   each block's served and candidate values, joined by a line (the pairing is the unit),
                         each point labelled with when its arm ran in the block; y from zero, or a broken axis
    plot_kl              the distribution of per-position KL of the candidate against the noise floor, on a log
                         axis of positive KL with the tolerance and threshold drawn and the positions above the
                         threshold marked (legend beside the axes, counting positions)
    plot_pass_matrix     pass/fail per task and draw (rows) and block and arm (columns)

Each takes plain data and a path and writes one PNG; none reads the store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

COLOURS = {"served": "#4c72b0", "candidate": "#dd8452", "noise": "#8c8c8c"}


def _figure(width: float, height: float, layout: Literal["constrained"] | None = None) -> Any:
    # matplotlib is heavy: imported on the first plot, not when the note's module is loaded.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:  # a constrained figure lays itself out (legends outside the axes)
        fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def run_positions(order: Sequence[str], arm: str) -> str:
    """When ``arm`` ran in its block, e.g. ``1st`` or ``2nd+3rd`` (1-based positions in the block's arm order)."""
    return "+".join(ordinal(i + 1) for i, a in enumerate(order) if a == arm)


BROKEN_BELOW = 0.5
"""The block plot starts its y axis at zero unless every value lies above this share of the largest, where a zero
baseline would flatten the pairs: then the axis is drawn broken (a short zero-based strip below a break mark)."""


def plot_paired_blocks(
    path: Path,
    blocks: Sequence[str],
    served: Sequence[float | None],
    candidate: Sequence[float | None],
    metric: str,
    title: str,
    *,
    orders: Sequence[Sequence[str]] | None = None,
) -> Path:
    """One x position per block; a line joins the block's two values, so the eye reads pairs, not clouds."""
    return _save(paired_blocks_figure(blocks, served, candidate, metric, title, orders=orders), path)


def paired_blocks_figure(
    blocks: Sequence[str],
    served: Sequence[float | None],
    candidate: Sequence[float | None],
    metric: str,
    title: str,
    *,
    orders: Sequence[Sequence[str]] | None = None,
) -> Any:
    """The block plot: each point is labelled with when its arm ran in the block (``orders``: the arm order per
    block as the starts were recorded), and the y axis starts at zero (or below it, for a metric with values at
    or below zero) or is drawn broken (:data:`BROKEN_BELOW`)."""
    values = [v for v in (*served, *candidate) if v is not None and math.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    broken = lo > 0 and lo > BROKEN_BELOW * hi
    fig = _figure(max(4.5, 0.7 * len(blocks) + 2.5), 3.6 if broken else 3.2, layout="constrained")
    if broken:
        ax, base = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [6, 1]})
    else:
        ax, base = fig.add_subplot(1, 1, 1), None
    xs = list(range(len(blocks)))
    for x, s, c in zip(xs, served, candidate):
        if s is not None and c is not None:
            ax.plot([x - 0.12, x + 0.12], [s, c], color="#bbbbbb", linewidth=1, zorder=1)
    for arm, vals, dx in (("served", served, -0.12), ("candidate", candidate, 0.12)):
        pts = [(x + dx, v, x) for x, v in zip(xs, vals) if v is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=COLOURS[arm], label=arm, zorder=2, s=28)
        for px, v, b in pts if orders else ():
            if b < len(orders or ()) and (when := run_positions(orders[b], arm)):  # type: ignore[index]
                ax.annotate(
                    when,
                    (px, v),
                    textcoords="offset points",
                    xytext=(-4 if dx < 0 else 4, 5),
                    ha="right" if dx < 0 else "left",
                    fontsize=6,
                    color=COLOURS[arm],
                )
    pad = (hi - lo) * 0.15 or abs(hi) * 0.05 or 1.0
    if base is None:
        ax.set_ylim(0.0 if lo > 0 else lo - pad, hi + pad)  # a value at or below zero stays in view
    else:
        ax.set_ylim(lo - pad, hi + pad)
        base.set_ylim(0, (hi + pad) * 0.02 or 1.0)
        base.set_yticks([0])
        ax.spines["bottom"].set_visible(False)
        base.spines["top"].set_visible(False)
        ax.tick_params(bottom=False)
        kw = {"marker": [(-1, -0.5), (1, 0.5)], "markersize": 10, "linestyle": "none", "color": "k", "clip_on": False}
        ax.plot([0, 1], [0, 0], transform=ax.transAxes, **kw)
        base.plot([0, 1], [1, 1], transform=base.transAxes, **kw)
    bottom = base if base is not None else ax
    bottom.set_xticks(xs, [str(b) for b in blocks])
    bottom.set_xlabel("block (labels: when each arm ran in its block)" if orders else "block")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    if values:
        fig.legend(fontsize=8, frameon=False, loc="outside right upper")
    return fig


def _ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Step points of the empirical CDF: a leading point at height 0, then one per finite value (so ``len - 1``
    positions; :func:`positions` counts them)."""
    xs = sorted(v for v in values if math.isfinite(v))
    n = len(xs)
    if not n:
        return [], []
    return [xs[0], *xs], [0.0, *((i + 1) / n for i in range(n))]


def positions(values: Sequence[float]) -> int:
    """How many positions an ECDF curve of ``values`` draws (the finite values)."""
    return sum(1 for v in values if math.isfinite(v))


def plot_kl(
    path: Path,
    candidate: Sequence[float],
    noise: Sequence[float] | None,
    *,
    tolerance: float | None = None,
    threshold: float | None = None,
    title: str = "",
) -> Path:
    """Empirical CDFs of per-position KL (nats, log axis of positive KL): the candidate's and the noise floor's (A vs A′).
    Top-k KL is a lower bound of the full KL; the axis label says so."""
    return _save(kl_figure(candidate, noise, tolerance=tolerance, threshold=threshold, title=title), path)


KL_FLOOR = 1e-6  # nats: KL at or below this (zero, or a rounding error below it) is drawn at the floor


def kl_floor(values: Sequence[float], tolerance: float | None = None) -> float:
    """The log axis's left edge: the smallest positive KL shown, at most a thousandth of the tolerance and
    never below :data:`KL_FLOOR`."""
    positive = [v for v in values if math.isfinite(v) and v > KL_FLOOR]
    lowest = min(positive, default=1e-3)
    if tolerance:
        lowest = min(lowest, tolerance / 1e3)
    return max(KL_FLOOR, 10 ** math.floor(math.log10(lowest)))


def kl_figure(
    candidate: Sequence[float],
    noise: Sequence[float] | None,
    *,
    tolerance: float | None = None,
    threshold: float | None = None,
    title: str = "",
) -> Any:
    """The KL plot on a log axis of positive KL (values at or below the floor drawn at it, and counted in
    the legend), the tolerance and threshold drawn, the positions above the threshold marked; its legend
    counts positions (not ECDF points) and sits beside the axes, off the curves."""
    fig = _figure(7.5, 3.4, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    floor = kl_floor([*candidate, *(noise or [])], tolerance)
    for name, vals in (("noise floor (served vs served)", noise), ("candidate vs served", candidate)):
        if vals:
            shown = [max(v, floor) for v in vals]
            xs, ys = _ecdf(shown)
            at_floor = sum(1 for v in vals if math.isfinite(v) and v <= floor)
            low = f", {at_floor} at or below {floor:g}" if at_floor else ""
            colour = COLOURS["noise"] if name.startswith("noise") else COLOURS["candidate"]
            ax.step(xs, ys, where="post", label=f"{name}, {positions(vals)} positions{low}", color=colour)
    if tolerance is not None:
        ax.axvline(tolerance, color="#55a868", linestyle="--", linewidth=1, label=f"tolerance (mean) {tolerance:g}")
    if threshold is not None:
        ax.axvline(threshold, color="#c44e52", linestyle=":", linewidth=1, label=f"threshold {threshold:g}")
        _mark_above(ax, candidate, threshold)
    ax.set_xscale("log")
    ax.set_xlim(left=floor / 3)  # a margin, so positions drawn at the floor show beside the axis
    ax.set_xlabel("KL per position, nats (log axis; top-k lower bound)")
    ax.set_ylabel("share of positions ≤ x")
    ax.set_title(title, fontsize=10)
    fig.legend(fontsize=7, frameon=False, loc="outside right upper")
    return fig


def _mark_above(ax: Any, candidate: Sequence[float], threshold: float) -> None:
    """A marker on the candidate's curve at each position above the threshold, counted in the legend."""
    xs, ys = _ecdf(candidate)
    above = [(x, y) for x, y in zip(xs[1:], ys[1:]) if x > threshold]
    ax.scatter(
        [x for x, _ in above],
        [y for _, y in above],
        marker="x",
        color="#c44e52",
        zorder=3,
        label=f"{len(above)} candidate position(s) above the threshold",
    )


def plot_pass_matrix(
    path: Path, rows: Sequence[str], cols: Sequence[str], cells: Sequence[Sequence[bool | None]], title: str = ""
) -> Path:
    """Green pass, red fail, grey not run; one row per task and draw, one column per block and arm."""
    from matplotlib.colors import ListedColormap

    grid = [[math.nan if v is None else float(v) for v in row] for row in cells]
    fig = _figure(max(4.0, 0.45 * len(cols) + 2.5), max(2.5, 0.35 * len(rows) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    cmap = ListedColormap(["#c44e52", "#55a868"]).with_extremes(bad="#dddddd")
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)), list(cols), rotation=60, fontsize=7, ha="right")
    ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
    ax.set_title(title or "pass matrix (green pass, red fail)", fontsize=10)
    return _save(fig, path)
