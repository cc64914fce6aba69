"""`frank analyze --blocks FILE.csv`: exact output, and one message per bad CSV naming file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.cli import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def write(tmp_path: Path, text: str, name: str = "blocks.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


RATIO_CSV = "block,served,candidate\n1,10,9\n2,10,9.5\n3,10,9.8\n4,10,9.1\n5,10,9.9\n"


def test_sign_five_of_five_full_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, RATIO_CSV)
    rc, out, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--direction", "lower"], capsys)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        "block  served  candidate  ratio - 1  log ratio  favours",
        "-----  ------  ---------  ---------  ---------  ---------",
        "1          10          9    -10.00%    -0.1054  candidate",
        "2          10        9.5     -5.00%    -0.0513  candidate",
        "3          10        9.8     -2.00%    -0.0202  candidate",
        "4          10        9.1     -9.00%    -0.0943  candidate",
        "5          10        9.9     -1.00%    -0.0101  candidate",
        "",
        "rule: sign (sign test, one-sided, candidate better, ties count against; alpha = 0.05)",
        "direction: lower is better for the candidate",
        "blocks: 5; favour the candidate: 5, the served arm: 0, ties: 0",
        "geometric-mean ratio (candidate/served): 0.9453 (-5.47%)",
        "90% CI for the median ratio (order statistics of the log ratios): [0.9, 0.99] (exact coverage 15/16 = 0.9375)",
        "p = 1/32 = 0.03125 (scipy, the same test: 0.03125)",
        "verdict: confirmed (p <= alpha = 0.05)",
    ]


def test_differences_with_permutation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"b{i},{d}\n" for i, d in enumerate([2, 1, 1, 0, 3, 1, -1, 2, 0, 1], start=1))
    p = write(tmp_path, "block,difference\n" + rows)
    rc, out, _ = run(["analyze", "--blocks", str(p), "--rule", "permutation", "--direction", "higher"], capsys)
    lines = out.splitlines()
    assert rc == 0
    assert lines[:3] == ["block  difference  favours", "-----  ----------  ---------", "b1              2  candidate"]
    assert "mean difference (candidate - served): +1" in lines
    assert "p = 3/128 = 0.02344 (scipy, the same test: 0.0234375)" in lines
    assert lines[-1] == "verdict: confirmed (p <= alpha = 0.05)"


def test_columns_in_any_order_comments_and_blank_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(
        tmp_path,
        "# measured on box A\nCandidate, Served ,block\n\n11,10,1\n10.5,10,2\n10.2,10,3\n10.9,10,4\n10.1,10,5\n",
    )
    rc, out, _ = run(
        ["analyze", "--blocks", str(p), "--rule", "harm", "--test", "sign", "--direction", "lower"], capsys
    )
    assert rc == 0 and out.splitlines()[-1] == "verdict: harm shown (p <= alpha = 0.05)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "{p}: empty file; expected a header line: block,served,candidate or block,difference or arm,value"),
        (
            "\n# only a comment\n",
            "{p}: empty file; expected a header line: block,served,candidate or block,difference or arm,value",
        ),
        ("block,served,candidate\n", "{p}: no blocks after the header"),
        (
            "block,base,new\n1,2,3\n",
            "{p}: line 1: unknown header 'block,base,new'; expected block,served,candidate or block,difference or arm,value",
        ),
        (
            "block,served,served\n1,2,3\n",
            "{p}: line 1: unknown header 'block,served,served'; expected block,served,candidate or block,difference or arm,value",
        ),
        ("block,served,candidate\n1,10,9\n2,10,fast\n", "{p}: line 3, column candidate: not a number: 'fast'"),
        ("block,served,candidate\n1,10,9\n\n2,nan,9\n", "{p}: line 4, column served: not a finite number: 'nan'"),
        (
            "block,served,candidate\n1,10,9\n2,10,0\n",
            "{p}: line 3, column candidate: must be positive for a ratio, found 0",
        ),
        ("block,served,candidate\n1,-3,9\n", "{p}: line 2, column served: must be positive for a ratio, found -3"),
        ("block,served,candidate\n1,10,9\n2,10,9\n1,10,9\n", "{p}: line 4: duplicate block '1' (first on line 2)"),
        ("block,served,candidate\n1,10,9\n2,10\n", "{p}: line 3: expected 3 fields (block,served,candidate), found 2"),
        ("block,difference\n,3\n", "{p}: line 2, column block: empty block name"),
        (
            "block,served,candidate\n1,10,9\n2,10,9\n3,10,9\n4,10,9\n",
            "{p}: 4 blocks cannot reach alpha = 0.05 under the sign rule: the smallest reachable p is 1/16 = 0.0625 "
            "(it needs at least 5 blocks)",
        ),
    ],
)
def test_bad_csv_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    p = write(tmp_path, text)
    rc, out, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--direction", "lower"], capsys)
    assert (rc, out) == (1, "")
    assert err == f"frank: error: {message.format(p=p)}\n"


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "nope.csv"
    rc, _, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--direction", "lower"], capsys)
    assert (rc, err) == (1, f"frank: error: {p}: file not found\n")


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00block")
    rc, _, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--direction", "lower"], capsys)
    assert (rc, err) == (1, f"frank: error: {p}: not a UTF-8 text file\n")


def test_too_few_blocks_for_a_two_sided_permutation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, RATIO_CSV)
    rc, _, err = run(
        ["analyze", "--blocks", str(p), "--rule", "permutation", "--side", "two-sided", "--direction", "lower"], capsys
    )
    assert (rc, err) == (
        1,
        f"frank: error: {p}: 5 blocks cannot reach alpha = 0.05 under the permutation rule: "
        "the smallest reachable p is 1/16 = 0.0625 (it needs at least 6 blocks)\n",
    )


def test_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, RATIO_CSV)
    rc, _, err = run(
        ["analyze", "--blocks", str(p), "--rule", "sign", "--side", "worse", "--direction", "lower"], capsys
    )
    assert (rc, err) == (
        1,
        "frank: error: --side applies only to the order_adjusted and permutation rule, not 'sign'\n",
    )
    rc, _, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--alpha", "0", "--direction", "lower"], capsys)
    assert (rc, err) == (1, "frank: error: rule alpha: must be above 0 and at most 0.5 (0.05 is usual), got 0\n")
    rc, _, err = run(["analyze", "--blocks", str(p), "--rule", "sign"], capsys)
    assert rc == 2 and "without a DESIGN_ID, --blocks, --rule and --direction are required" in err
    rc, _, err = run(["analyze", "--blocks", str(p), "--rule", "signs", "--direction", "lower"], capsys)
    assert rc == 2 and "'signs' is not one of" in err
    rc, _, err = run(["analyze", "d-1", "--blocks", str(p)], capsys)
    assert rc == 2 and "give a DESIGN_ID or --blocks, not both" in err
    rc, _, err = run(["analyze", "d-1", "--rule", "sign"], capsys)
    assert rc == 2 and "a registered design is analysed under its registered rule" in err


def test_real_entry_point_and_help(tmp_path: Path) -> None:
    p = write(tmp_path, RATIO_CSV)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "analyze",
            "--blocks",
            str(p),
            "--rule",
            "all_blocks_better",
            "--direction",
            "lower",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "verdict: confirmed (all 5 blocks favour the candidate)"
    res = subprocess.run(
        [sys.executable, "-m", "frankenstein", "analyze", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "Example: frank analyze --blocks blocks.csv --rule sign --direction lower" in res.stdout
