"""The false-positive rate of the exact rules over many A/A designs on the real llama-server.

Each A/A design: the tiny target with the same recipe in both arms, N blocks, one fresh start per arm
per block, the primary metric decode_ms_per_token (a timing, so noisy). Every design is registered and
run by the real runner; the verdict of each rule is computed on the same recorded blocks. The rate is
reported with its exact (Clopper-Pearson) 95% interval. Block values are written to a CSV that
benchmarks/aa_false_positive.py --aa can resample.

Run: .venv/bin/python benchmarks/aa_llamacpp.py --designs 40 --blocks 5 --out /tmp/aa-blocks.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers_campaign import make_campaign, make_workload, write_design  # noqa: E402

from frankenstein.design import rules  # noqa: E402
from frankenstein.design.analysis import block_values  # noqa: E402
from frankenstein.design.registry import get, register  # noqa: E402
from frankenstein.design.runner import run_design  # noqa: E402

RULES = {
    "sign": rules.SignRule(alpha=0.05),
    "permutation (better)": rules.PermutationRule(alpha=0.05, side="better"),
    "permutation (two-sided)": rules.PermutationRule(alpha=0.05, side="two-sided"),
    "all_blocks_better": rules.AllBlocksBetter(alpha=0.05),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="frank-aa-"))
    c = make_campaign(root / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=4, tokens=16)
    fired = {k: 0 for k in RULES}
    csv_rows = ["block,served,candidate"]
    for i in range(args.designs):
        p = write_design(c.root / f"aa{i}.toml", name=f"aa{i}", kind="aa", candidate_parts="[]",
                         blocks=args.blocks, rule="sign")
        p.write_text(p.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "decode_ms_per_token"'))
        reg = register(c, p)
        run_design(c, reg.design_id, echo=lambda s: None)
        served, cand, _ = block_values(c, get(c, reg.design_id))
        s = [served[b] for b in sorted(served)]
        k = [cand[b] for b in sorted(cand)]
        csv_rows += [f"{i}.{b},{x},{y}" for b, x, y in zip(sorted(served), s, k)]
        for name, rule in RULES.items():
            v = rules.evaluate(rule, s, k, "lower")
            fired[name] += v.word == "confirmed"
        print(f"design {i + 1}/{args.designs}: " + ", ".join(f"{n}={fired[n]}" for n in RULES), flush=True)
    print(f"\nA/A on llama-server (tiny target, {args.blocks} blocks, decode_ms_per_token, alpha 0.05), {args.designs} designs:")
    for name, n in fired.items():
        ci = binomtest(n, args.designs).proportion_ci(0.95, method="exact")
        print(f"  {name:<26} fired {n:>3}/{args.designs} = {n / args.designs:.3f}  (95% CI {ci.low:.3f}–{ci.high:.3f})")
    if args.out:
        args.out.write_text("\n".join(csv_rows) + "\n")
        print(f"block values: {args.out}")


if __name__ == "__main__":
    main()
