"""Grader for latency-report: report.json against a report computed from a fresh copy of the trace."""

import json
import sys
import tempfile
from pathlib import Path

import tracegen


def close(a, b, tol):
    return isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a - b) <= tol


def problems(got, want):
    out = []
    if not isinstance(got, dict):
        return ["report.json is not a JSON object"]
    if got.get("skipped_lines") != want["skipped_lines"]:
        out.append("skipped_lines")
    if got.get("slowest_endpoint") != want["slowest_endpoint"]:
        out.append("slowest_endpoint")
    endpoints = got.get("endpoints")
    if not isinstance(endpoints, dict) or sorted(endpoints) != sorted(want["endpoints"]):
        return out + ["endpoints: wrong set of endpoints"]
    for name, w in want["endpoints"].items():
        g = endpoints[name] if isinstance(endpoints[name], dict) else {}
        if g.get("requests") != w["requests"]:
            out.append(f"{name}: requests")
        if not close(g.get("error_rate"), w["error_rate"], 1e-4):
            out.append(f"{name}: error_rate")
        for key in ("p50_ms", "p95_ms"):
            if not close(g.get(key), w[key], 1e-6):
                out.append(f"{name}: {key}")
    return out


def main(workspace):
    path = Path(workspace) / "report.json"
    if not path.is_file():
        print("FAIL: no report.json in the workspace")
        return 1
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        print(f"FAIL: report.json is not JSON ({exc})")
        return 1
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "requests.jsonl"
        tracegen.generate(trace, tracegen.SEED)
        want = tracegen.expected(trace)
    wrong = problems(got, want)
    for p in wrong:
        print(f"FAIL {p}")
    print(f"{'pass' if not wrong else 'fail'}: {len(wrong)} problem(s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
