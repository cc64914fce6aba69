"""The false-positive rate of the exact rules over many A/A designs on the real llama-server.

One A/A design (the tiny target with the same recipe in both arms, one fresh start per arm per block,
arm order randomized, primary metric decode_ms_per_token: a timing, so noisy) is registered and run by
the real runner; its blocks are cut into non-overlapping designs of 6, 8 and 10 blocks, and every rule
decides each of them. Every firing (confirmed or harm shown) is a false positive; the rate is reported
with its exact (Clopper-Pearson) 95% interval. Few designs fit in a few minutes, so these rows show
that real noise does not break the rules grossly; the simulated rows (aa_false_positive.py) measure
the rates. Block values go to a CSV that benchmarks/aa_false_positive.py --aa can resample.

Run: .venv/bin/python benchmarks/aa_llamacpp.py --blocks 60 --out /tmp/aa-blocks.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers_campaign import make_campaign, make_workload, write_design  # noqa: E402

from frankenstein.design import rules  # noqa: E402
from frankenstein.design.analysis import block_values  # noqa: E402
from frankenstein.design.registry import get, register  # noqa: E402
from frankenstein.design.runner import run_design  # noqa: E402

RULES = {
    "all_blocks_better": rules.parse_rule("all_blocks_better"),
    "sign": rules.parse_rule("sign"),
    "permutation": rules.parse_rule("permutation"),
    "permutation two-sided": rules.parse_rule("permutation", side="two-sided"),
    "harm (permutation)": rules.parse_rule("harm"),
    "harm (sign)": rules.parse_rule("harm", test="sign"),
}


def measure(blocks: int) -> tuple[list[float], list[float]]:
    """One registered A/A design of ``blocks`` blocks run by the real runner on llama-server."""
    root = Path(tempfile.mkdtemp(prefix="frank-aa-"))
    c = make_campaign(root / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2, tokens=16)
    p = write_design(c.root / "aa.toml", name="aa", kind="aa", candidate_parts="[]", blocks=blocks, rule="sign")
    p.write_text(p.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "decode_ms_per_token"'))
    reg = register(c, p)
    run_design(c, reg.design_id, echo=lambda s: None)
    served, cand, _ = block_values(c, get(c, reg.design_id))
    return [served[b] for b in sorted(served)], [cand[b] for b in sorted(cand)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=60, help="blocks of the one A/A run (each block: two real starts)")
    ap.add_argument("--windows", type=int, nargs="+", default=[6, 8, 10], help="design sizes cut from the run")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    s, k = measure(args.blocks)
    print(
        f"A/A on llama-server (tiny target, decode_ms_per_token, alpha 0.05): {len(s)} blocks in "
        f"{time.perf_counter() - t0:.0f} s, cut into non-overlapping designs of each size"
    )
    for n in args.windows:
        designs = len(s) // n
        for name, rule in RULES.items():
            words = [
                rules.evaluate(rule, s[i * n : (i + 1) * n], k[i * n : (i + 1) * n], "lower").word
                for i in range(designs)
            ]
            fired = words.count("confirmed") + words.count("harm shown")
            ci = binomtest(fired, designs).proportion_ci(0.95, method="exact") if designs else None
            span = f"[{ci.low:.3f}, {ci.high:.3f}]" if ci else "-"
            print(
                f"  {n:>3} blocks  {name:<22} fired {fired:>3}/{designs} (confirmed {words.count('confirmed')}, "
                f"harm {words.count('harm shown')})  95% CI {span}"
            )
    if args.out:
        args.out.write_text(
            "block,served,candidate\n" + "".join(f"{i + 1},{x},{y}\n" for i, (x, y) in enumerate(zip(s, k)))
        )
        print(f"block values: {args.out}")


if __name__ == "__main__":
    main()
