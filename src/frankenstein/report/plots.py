"""PNG plots for the progress note (matplotlib, Agg canvas; no pyplot, so no global state or display).

    plot_paired_blocks   each block's served and candidate values, joined by a line (the pairing is the unit)
    plot_kl              the distribution of per-position KL of the candidate against the noise floor
    plot_pass_matrix     pass/fail per task and draw (rows) and block and arm (columns)

Each takes plain data and a path and writes one PNG; none reads the store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLOURS = {"served": "#4c72b0", "candidate": "#dd8452", "noise": "#8c8c8c"}


def _figure(width: float, height: float) -> Any:
    # matplotlib is heavy: imported on the first plot, not when the note's module is loaded.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def plot_paired_blocks(
    path: Path,
    blocks: Sequence[str],
    served: Sequence[float | None],
    candidate: Sequence[float | None],
    metric: str,
    title: str,
) -> Path:
    """One x position per block; a line joins the block's two values, so the eye reads pairs, not clouds."""
    fig = _figure(max(4.0, 0.6 * len(blocks) + 2.0), 3.2)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(blocks)))
    for x, s, c in zip(xs, served, candidate):
        if s is not None and c is not None:
            ax.plot([x - 0.12, x + 0.12], [s, c], color="#bbbbbb", linewidth=1, zorder=1)
    for arm, vals, dx in (("served", served, -0.12), ("candidate", candidate, 0.12)):
        pts = [(x + dx, v) for x, v in zip(xs, vals) if v is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=COLOURS[arm], label=arm, zorder=2, s=28)
    ax.set_xticks(xs, [str(b) for b in blocks])
    ax.set_xlabel("block")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    return _save(fig, path)


def _ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(v for v in values if math.isfinite(v))
    n = len(xs)
    if not n:
        return [], []
    return [xs[0], *xs], [0.0, *((i + 1) / n for i in range(n))]


def plot_kl(
    path: Path,
    candidate: Sequence[float],
    noise: Sequence[float] | None,
    *,
    tolerance: float | None = None,
    threshold: float | None = None,
    title: str = "",
) -> Path:
    """Empirical CDFs of per-position KL (nats, symlog axis): the candidate's and the noise floor's (A vs A′).
    Top-k KL is a lower bound of the full KL; the axis label says so."""
    fig = _figure(5.5, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    for name, vals in (("noise floor (served vs served)", noise), ("candidate vs served", candidate)):
        if vals:
            xs, ys = _ecdf(vals)
            colour = COLOURS["noise"] if name.startswith("noise") else COLOURS["candidate"]
            ax.step(xs, ys, where="post", label=f"{name}, {len(xs)} positions", color=colour)
    if tolerance is not None:
        ax.axvline(tolerance, color="#55a868", linestyle="--", linewidth=1, label=f"tolerance (mean) {tolerance:g}")
    if threshold is not None:
        ax.axvline(threshold, color="#c44e52", linestyle=":", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_xscale("symlog", linthresh=1e-4)
    ax.set_xlabel("KL per position, nats (top-k lower bound)")
    ax.set_ylabel("share of positions ≤ x")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return _save(fig, path)


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
