"""Arm orders: balanced (counter-balanced in pairs of blocks) for new registrations, the draw registered;
designs registered before the `order` field keep their independent draw, verify and run as registered;
analyze warns when every block runs the arms in the same order (real store, real command-arm starts)."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from frankenstein.campaign import Campaign
from frankenstein.design import registry
from frankenstein.design.analysis import analyze
from frankenstein.design.registry import get, register, verify
from frankenstein.design.runner import run_design
from frankenstein.store import RegistryRow, now_iso

from helpers_campaign import make_campaign

BENCH = """\
import json, sys
print(json.dumps({"verify_step_ms": float(sys.argv[1])}))
"""

DESIGN = """\
name = "kernel"
kind = "speed"
blocks = 6
primary_metric = "verify_step_ms"
{extra}
[arms.served]
command = ["{py}", "{bench}", "2.0"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5"]

[rule]
kind = "all_blocks_better"
"""


def _design(root: Path, extra: str = "") -> Path:
    (root / "bench.py").write_text(BENCH)
    p = root / "kernel.toml"
    p.write_text(DESIGN.format(py=sys.executable, bench=root / "bench.py", extra=extra))
    return p


def _swapped(order: list[str]) -> list[str]:
    return ["candidate" if a == "served" else "served" for a in order]


@pytest.mark.parametrize("starts", [1, 2, 3])
def test_a_new_design_draws_balanced_orders_and_registers_the_draw(tmp_path: Path, starts: int) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root, f"starts_per_arm = {starts}"))
    assert reg.design.order == "balanced" and reg.order == "balanced"
    assert json.loads(c.store.registry_rows()[0].canonical)["frozen"]["design"]["order"] == "balanced"
    for b in (1, 3, 5):
        assert reg.schedule[b] == _swapped(reg.schedule[b - 1])
    for pos in range(2 * starts):  # every position is held by each arm in half of the blocks
        assert sum(order[pos] == "served" for order in reg.schedule) == 3


def test_an_odd_last_block_is_drawn_on_its_own(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _odd(c.root))
    assert len(reg.schedule) == 5 and reg.schedule[1] == _swapped(reg.schedule[0])
    assert sorted(reg.schedule[4]) == ["candidate", "served"]


def _odd(root: Path) -> Path:
    p = _design(root)
    p.write_text(p.read_text().replace("blocks = 6", "blocks = 5"))
    return p


def _old_draw(seed: str, blocks: int, starts: int) -> list[list[str]]:
    """The draw every design registered before `order` existed (copied from the code of that time)."""
    rng = random.Random(int(seed, 16))
    out = []
    for _ in range(blocks):
        order = [arm for arm in ("served", "candidate") for _ in range(starts)]
        rng.shuffle(order)
        out.append(order)
    return out


def test_order_independent_is_the_draw_older_designs_registered(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    design = registry.load_design(_design(c.root, 'order = "independent"\nstarts_per_arm = 2'))
    for seed in ("ab" * 8, "0123456789abcdef", "ffffffffffffffff"):
        assert registry.make_schedule(seed, design) == _old_draw(seed, 6, 2)
    old = registry.load_design(_design(c.root))  # order unset, as every older design file reads
    assert old.order is None and registry.make_schedule("ab" * 8, old) == _old_draw("ab" * 8, 6, 1)


def _append_old_row(camp: Campaign, path: Path, schedule: list[list[str]]) -> str:
    """A design row as an older frank wrote it: no `order` or `layout` in the stored design, its own schedule."""
    design = registry.load_design(path)
    frozen = registry.check_design(camp, design, path).model_dump(mode="json")
    for key in ("order", "layout"):
        del frozen["design"][key]
    source = path.read_bytes()
    text = registry.canonical({"frozen": frozen, "source_sha256": registry.sha256(source)})
    seed, at, sched = "ab" * 8, now_iso(), registry.canonical(schedule)

    def build(last: RegistryRow | None) -> RegistryRow:
        seq = (last.seq if last else 0) + 1
        prev = last.row_hash if last else registry.GENESIS
        did = f"{design.name}-{seq}"
        (camp.root / "designs" / f"{did}.toml").write_bytes(source)
        row_hash = registry._row_hash(prev, did, registry.sha256(text), seed, sched, at, "0.0.9", text)
        return RegistryRow(seq, did, design.kind, design.name, text, registry.sha256(text), seed, sched, at, "0.0.9",
                           prev, row_hash)  # fmt: skip

    return camp.store.append_registry(build).design_id


def test_an_older_design_verifies_runs_as_registered_and_warns_of_alike_orders(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    alike = [["served", "candidate"]] * 6  # served first in every block: what an independent draw can give
    did = _append_old_row(c, _design(c.root), alike)
    assert len(verify(c)) == 1
    reg = get(c, did)
    assert reg.design.order is None and reg.order == "independent" and reg.schedule == alike
    run_design(c, did, echo=lambda s: None)
    ran = c.store.query("SELECT arm FROM starts ORDER BY block, position")
    assert [r["arm"] for r in ran] == ["served", "candidate"] * 6  # run as registered
    a = analyze(c, did)
    assert a.word == "confirmed"
    assert (
        "every block runs its arms in the same order (served, candidate; drawn independently): an order effect "
        "(a warmer machine, a filled page cache) would look like an effect of the part"
    ) in a.warnings


def test_balanced_orders_never_warn(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root))
    run_design(c, reg.design_id, echo=lambda s: None)
    assert not [w for w in analyze(c, reg.design_id).warnings if "same order" in w]


def test_a_bad_order_is_refused_naming_the_field(tmp_path: Path) -> None:
    from frankenstein.errors import DesignError

    c = make_campaign(tmp_path / "c")
    with pytest.raises(DesignError, match=r"kernel.toml: order"):
        register(c, _design(c.root, 'order = "latin"'))


# -- the order-adjusted exact test


def _balanced_gains(d: list[float], coins: tuple[int, ...]) -> list[float]:
    """Gains under the sharp null: a block's gain is d_b with served first and -d_b with candidate first; one
    coin per pair draws the first block's order, and the second runs it with the arms swapped."""
    out = []
    for i, s in enumerate(coins):
        out += [s * d[2 * i], -s * d[2 * i + 1]]
    return out


@pytest.mark.parametrize("n", [10, 12])
def test_order_adjusted_fires_on_exactly_its_size_of_every_balanced_assignment(n: int) -> None:
    """A 3 % order effect (the second start slower) and no effect of the part: over every one of the
    2**(n/2) balanced draws the order-adjusted rule fires on floor(alpha * 2**(n/2)) of them, exactly its
    size; the per-block sign-flip test, blind to the pairs, fires on its own share, here no more."""
    from frankenstein.design.rules import decide, parse_rule

    rng = random.Random(n)
    d = [0.03 + rng.gauss(0, 0.004) for _ in range(n)]  # log(served/candidate) with served first
    adjusted, plain = parse_rule("order_adjusted"), parse_rule("permutation")
    draws = list(itertools.product((1, -1), repeat=n // 2))
    fired = sum(decide(adjusted, _balanced_gains(d, c), "lower").word == "confirmed" for c in draws)
    assert Fraction(fired, len(draws)) == Fraction(math.floor(0.05 * len(draws)), len(draws))
    plain_fired = sum(decide(plain, _balanced_gains(d, c), "lower").word == "confirmed" for c in draws)
    assert Fraction(plain_fired, len(draws)) <= Fraction(1, 20)


def test_order_adjusted_sees_an_effect_the_order_hides(tmp_path: Path) -> None:
    """A 1 % faster part under a 3 % order effect: every pair's sum favours the candidate, so the
    order-adjusted rule confirms at p = 1/32, while the per-block test does not reach 0.05."""
    from frankenstein.design.rules import evaluate, parse_rule

    served, candidate = [], []
    for i in range(5):  # pair i: served first, then candidate first (log-scale values, 100 ms base)
        served += [100.0, 103.0]
        candidate += [(99.0 + 0.1 * i) * 1.03, 99.0 + 0.1 * i]
    v = evaluate(parse_rule("order_adjusted"), served, candidate, "lower")
    assert v.word == "confirmed" and v.p == Fraction(1, 32) and "5 pairs of counter-balanced blocks" in v.reason
    assert v.ci is not None and v.ci.high < 1.0  # the interval, over pair means, excludes no change
    assert evaluate(parse_rule("permutation"), served, candidate, "lower").word == "not confirmed"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'order = "independent"\nfailure_policy = "invalidate"',
            "kernel.toml: order: the order_adjusted rule tests pairs",
        ),
        (
            'failure_policy = "invalidate"\n',
            "kernel.toml: blocks: the order_adjusted rule tests pairs of blocks: an even",
        ),
        ("", "kernel.toml: failure_policy: a dropped block would break its pair"),
    ],
)
def test_order_adjusted_needs_its_shape(tmp_path: Path, extra: str, message: str) -> None:
    from frankenstein.errors import DesignError

    c = make_campaign(tmp_path / "c")
    p = _design(c.root, extra)
    text = (
        p.read_text()
        .replace('kind = "all_blocks_better"', 'kind = "order_adjusted"')
        .replace("blocks = 6", "blocks = 10")
    )
    if "even" in message:
        text = text.replace("blocks = 10", "blocks = 11")
    p.write_text(text)
    with pytest.raises(DesignError, match=message):
        register(c, p)


def test_an_order_adjusted_design_runs_and_decides(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    p = _design(c.root, 'failure_policy = "invalidate"')
    p.write_text(
        p.read_text()
        .replace('kind = "all_blocks_better"', 'kind = "order_adjusted"')
        .replace("blocks = 6", "blocks = 10")
    )
    reg = register(c, p)
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.word == "confirmed" and a.verdict is not None and a.verdict.p == Fraction(1, 32)
