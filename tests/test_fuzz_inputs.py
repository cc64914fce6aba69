"""Fuzzing every file a user hands frank (issue #16): ``frank.toml``, design files, trace lines and
block CSVs, with wrong types, unicode, invalid UTF-8, NaN/inf, huge numbers, deep nesting and
directories where a file belongs. The property: a loader either accepts the file or raises one of our
errors whose message is one line naming the file; anything else (a traceback) fails the test.

The loaders run in-process (fast); a few real ``frank`` runs at the end check that the CLI prints
exactly that one line and exits 1.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frankenstein.campaign import init_campaign
from frankenstein.config import load_config
from frankenstein.design.blockcsv import read_blocks_csv
from frankenstein.design.model import load_design
from frankenstein.design.registry import check_design
from frankenstein.errors import FrankError, TraceError
from frankenstein.shipped import data_path
from frankenstein.workload.trace import load_trace

from conftest import frank
from helpers_cli import cli

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
WORK = Path(tempfile.gettempdir())  # replaced by the module's folder in ``work``

CONFIG = {
    "name": "fuzz",
    "served": "base",
    "recipes": {
        "base": {
            "engine": "llamacpp",
            "model": "pkg:tiny-target.gguf",
            "args": ["--ctx-size", "2048"],
            "start_timeout_s": 120,
        }
    },
    "parts": {"draft": {"description": "d", "args": ["-md", "pkg:tiny-draft.gguf"]}},
}
DESIGN = {
    "name": "d",
    "kind": "speed",
    "blocks": 6,
    "starts_per_arm": 1,
    "workload": "pkg:demo-workload.jsonl",
    "arms": {"served": {"recipe": "served"}, "candidate": {"recipe": "served", "parts": ["draft"]}},
    "replay": {"warmup_turns": 1, "max_turns": 4, "temperature": 0.0, "request_timeout_s": 60.0},
    "rule": {"kind": "sign", "alpha": 0.05},
    "agent": {"temperature": 0.0, "limits": {"turns": 4.0}},
}
TURN = json.loads(data_path("demo-workload.jsonl").read_text().splitlines()[0])

# ------------------------------------------------------------------ strategies

scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 10**8, 10**18, 1e308, -0.0]),
    st.text(max_size=16),
    st.sampled_from(["", "pkg:", "pkg:nope", "/", "../..", "served", "sign", "é\u202e\x00"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _paths(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    return out


def _mutate(base: dict[str, Any], path: tuple[str, ...], action: str, value: Any, key: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(base))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if action == "set":
        parent[path[-1]] = value
    elif action == "delete":
        parent.pop(path[-1], None)
    elif isinstance(parent.get(path[-1]), dict):
        parent[path[-1]][key or "x"] = value
    else:
        parent[key or "x"] = value
    return doc


def mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        _mutate,
        st.just(base),
        st.sampled_from(_paths(base)),
        st.sampled_from(["set", "delete", "add"]),
        values,
        st.text(max_size=6),
    )


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string (lone surrogates make invalid TOML: also a case)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_text(doc: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in doc.items())


def damaged(text_strategy: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Valid-ish text, or the same with invalid UTF-8 or a NUL spliced in, or raw bytes, or deep nesting."""

    def splice(text: str, at: int, junk: bytes) -> bytes:
        raw = text.encode("utf-8", "surrogatepass")
        at = at % (len(raw) + 1)
        return raw[:at] + junk + raw[at:]

    return st.one_of(
        text_strategy.map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.builds(
            splice, text_strategy, st.integers(0, 10**6), st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])
        ),
        st.binary(max_size=200),
        st.integers(50, 20000).map(lambda n: b"x = " + b"[" * n + b"]" * n + b"\n"),
        st.integers(50, 20000).map(lambda n: b"[" * n + b"]" * n + b"\n"),
    )


# ------------------------------------------------------------------ the property


@pytest.fixture(scope="module", autouse=True)
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder and one campaign for every example (registration checks run against it)."""
    global WORK, CAMPAIGN
    WORK = tmp_path_factory.mktemp("fuzz")
    CAMPAIGN = init_campaign(WORK / "campaign")
    return WORK


def refused_cleanly(load: Callable[[Path], object], path: Path) -> None:
    """``load(path)`` returns, or raises a FrankError of one line that names ``path`` (or, for a
    design, names the workload file the design points at: then that file is what is wrong)."""
    try:
        load(path)
    except FrankError as exc:
        msg = str(exc)
        assert "\n" not in msg, f"a rejection of more than one line: {msg!r}"
        named = exc.path if isinstance(exc, TraceError) else path
        assert str(named) in msg, f"a rejection that does not name the file: {msg!r}"


def _write(name: str, data: bytes) -> Path:
    path = Path(tempfile.mkdtemp(dir=WORK)) / name
    path.write_bytes(data)
    return path


CAMPAIGN: Any = None


def _design(path: Path) -> object:
    return check_design(CAMPAIGN, load_design(path), path)


def test_the_unmutated_files_are_accepted() -> None:
    """The fuzz starts from valid files, so mutations reach the deep checks (registration included)."""
    load_config(_write("frank.toml", toml_text(CONFIG).encode()))
    _design(_write("design.toml", toml_text(DESIGN).encode()))
    load_trace(_write("w.jsonl", (json.dumps(TURN) + "\n").encode()))
    read_blocks_csv(_write("blocks.csv", b"block,difference\nb1,1\nb2,-2\n"))


@FUZZ
@given(damaged(mutated(CONFIG).map(toml_text)))
def test_frank_toml(data: bytes) -> None:
    refused_cleanly(load_config, _write("frank.toml", data))


@FUZZ
@given(damaged(mutated(DESIGN).map(toml_text)))
def test_design_files(data: bytes) -> None:
    refused_cleanly(_design, _write("design.toml", data))


def _trace_line(doc: dict[str, Any]) -> str:
    return json.dumps(doc)  # NaN / Infinity written as JSON's non-standard literals


@FUZZ
@given(damaged(mutated(TURN).map(_trace_line)), st.booleans())
def test_trace_lines(data: bytes, newline: bool) -> None:
    refused_cleanly(load_trace, _write("w.jsonl", data + (b"\n" if newline and not data.endswith(b"\n") else b"")))


cells = st.one_of(
    st.sampled_from(["1", "2.5", "-3", "0", "nan", "inf", "-inf", "1e400", "", " ", "1,2", '"', "b1", "é"]),
    st.text(max_size=6),
    st.integers().map(str),
    st.floats().map(repr),
)
headers = st.sampled_from(
    [
        "block,served,candidate",
        "block,difference",
        "served,block,candidate",
        "block,block",
        "block,served",
        "",
        "# c\nblock,difference",
        "\ufeffblock,difference",
    ]
)


@FUZZ
@given(
    damaged(
        st.builds(
            lambda h, rows: h + "\n" + "\n".join(",".join(r) for r in rows) + "\n",
            headers,
            st.lists(st.lists(cells, min_size=1, max_size=4), max_size=6),
        )
    )
)
def test_block_csvs(data: bytes) -> None:
    refused_cleanly(read_blocks_csv, _write("blocks.csv", data))


@pytest.mark.parametrize(
    "load", [load_config, _design, load_trace, read_blocks_csv], ids=["frank.toml", "design", "trace", "blocks.csv"]
)
def test_a_directory_where_a_file_belongs(load: Callable[[Path], object]) -> None:
    path = Path(tempfile.mkdtemp(dir=WORK)) / "a-folder.toml"
    path.mkdir()
    with pytest.raises(FrankError) as err:
        load(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


# ------------------------------------------------------------------ the real CLI


def _cli_cases(root: Path) -> list[tuple[list[str], Path]]:
    bad_utf8 = root / "designs" / "bad.toml"
    bad_utf8.write_bytes(b'name = "d"\n# \xff\xfe\n')
    nested = root / "designs" / "nested.toml"
    nested.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    folder = root / "designs" / "folder.toml"
    folder.mkdir()
    nan_trace = root / "workloads" / "nan.jsonl"
    nan_trace.write_text(json.dumps({**TURN, "request": {**TURN["request"], "temperature": float("nan")}}) + "\n")
    deep_trace = root / "workloads" / "deep.jsonl"
    deep_trace.write_text("[" * 100000 + "]" * 100000 + "\n")
    csv = root / "blocks.csv"
    csv.write_bytes(b"block,difference\nb1,\xff\n")
    return [
        (["register", str(bad_utf8), "-c", str(root)], bad_utf8),
        (["register", str(nested), "-c", str(root)], nested),
        (["register", str(folder), "-c", str(root)], folder),
        (["workload", "stats", str(nan_trace)], nan_trace),
        (["workload", "stats", str(deep_trace)], deep_trace),
        (["workload", "stats", str(root / "workloads")], root / "workloads"),
        (["analyze", "--blocks", str(csv), "--rule", "sign", "--direction", "lower"], csv),
    ]


def test_the_cli_prints_one_line_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "c"
    assert frank("init", str(root)).returncode == 0
    for args, path in _cli_cases(root):
        run = frank(*args)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 1 and "Traceback" not in run.stderr, (args, run.stderr)
        assert len(lines) == 1 and lines[0].startswith("frank: error: ") and str(path) in lines[0], (args, run.stderr)


def test_a_bad_frank_toml_on_the_cli(tmp_path: Path) -> None:
    for name, make in [("utf8", lambda p: p.write_bytes(b'name = "\xff"\n')), ("folder", lambda p: p.mkdir())]:
        root = tmp_path / name
        root.mkdir()
        make(root / "frank.toml")
        run = frank("served", "-c", str(root))
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and "frank.toml" in run.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# ------------------------------------------------------------------ issue 30, item 7: each input, 0 "unexpected"

ITEM7_TOML = [
    '[parts.p]\nargs = ["a\\u0000"]\n',
    '[parts.p]\nenv = { "A=B" = "1" }\n',
    '[parts.p]\nset = { "--x" = "\\u0000" }\n',
    '[recipes.cmd]\nengine = "openai"\ncommand = []\n',
]


@pytest.mark.parametrize("extra", ITEM7_TOML)
def test_item7_frank_toml_inputs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str) -> None:
    root = tmp_path / "c"
    init_campaign(root).close()
    toml = root / "frank.toml"
    toml.write_text(toml.read_text() + extra)
    code, _, err = cli(capsys, "served", "-c", str(root))
    assert code == 1 and err.startswith(f"frank: error: {toml}: ") and err.count("\n") == 1, err
    assert "unexpected" not in err


def test_item7_cli_inputs_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    init_campaign(root).close()
    blocks = tmp_path / "b.csv"
    blocks.write_text("block,difference\n" + "".join(f"b{i},1\n" for i in range(1001)))
    missing = root / "designs" / "m.toml"
    missing.write_text(
        'name = "m"\nblocks = 5\n[arms.served]\ncommand = ["/no/such/bench"]\n'
        f'[arms.candidate]\ncommand = ["{sys.executable}", "-c", "print(1)"]\n[rule]\nkind = "sign"\n'
    )
    for args, code_wanted, named in (
        (["analyze", "--blocks", str(blocks), "--rule", "sign", "--direction", "lower"], 1, str(blocks)),
        (["register", str(missing), "-c", str(root)], 1, f"{missing}: arms.served.command: command program"),
        (["serve", "-c", str(root), "--cache-mb", "-1"], 2, "--cache-mb"),
        (["tasks", "draw", "not a url", "--trace", str(tmp_path / "t"), "--work-dir", str(tmp_path)], 2, "not a url"),
    ):
        code, _, err = cli(capsys, *args)
        assert code == code_wanted and named in err and "unexpected" not in err and "Traceback" not in err, (args, err)


# booleans are not numbers in any user file (issue 30 item 7: pydantic read `true` as 1)

BOOLEAN_NUMBERS = [
    ("blocks = 6", "blocks = true", "blocks", "true"),
    ("alpha = 0.1", "alpha = true", "rule.alpha", "true"),
    ("[rule]", "[replay]\nwarmup_turns = false\n\n[rule]", "replay.warmup_turns", "false"),
]


@pytest.mark.parametrize(("old", "new", "field", "word"), BOOLEAN_NUMBERS)
def test_a_boolean_where_a_design_takes_a_number_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, field: str, word: str
) -> None:
    root = tmp_path / "c"
    init_campaign(root).close()
    design = root / "d.toml"
    text = (
        'name = "b"\nblocks = 6\nprimary_metric = "verify_step_ms"\n'
        f'[arms.served]\ncommand = ["{sys.executable}", "-c", "print(1)"]\n'
        f'[arms.candidate]\ncommand = ["{sys.executable}", "-c", "print(2)"]\n'
        '[rule]\nkind = "sign"\nalpha = 0.1\n'
    )
    assert old in text
    design.write_text(text.replace(old, new, 1))
    code, _, err = cli(capsys, "register", str(design), "-c", str(root))
    assert err == f"frank: error: {design}: {field}: {word} is a boolean, not a number\n", err
    assert code == 1


def test_a_boolean_where_frank_toml_takes_a_number_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    init_campaign(root).close()
    toml = root / "frank.toml"
    toml.write_text(toml.read_text().replace('engine = "llamacpp"', 'engine = "llamacpp"\nstart_timeout_s = true', 1))
    code, _, err = cli(capsys, "served", "-c", str(root))
    assert code == 1 and err == f"frank: error: {toml}: recipes.base.start_timeout_s: true is a boolean, not a number\n"
