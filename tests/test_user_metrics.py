"""User metrics (frank.toml ``[metrics.NAME]``): printed by a command arm, read from a real llama-server's
``/metrics``, or derived from stored turn fields; registered, analysed, plotted, exported and noted under their
own names and units. A design naming an unknown metric, and a bad declaration, are refused naming file and field."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.config import CampaignConfig, load_config
from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import ConfigError, DesignError
from frankenstein.measure.usermetrics import Declared, series, start_values, turn_value
from frankenstein.report.export import analysis_doc
from frankenstein.report.note import write_report

from helpers_campaign import TOML, make_campaign, make_workload
from helpers_cli import cli

METRICS = """
[metrics.time_per_job_ms]
unit = "ms"
direction = "lower"
source = "command"
description = "wall time per recorded job shape of the CPU-expert pool"

[metrics.tokens_per_decode]
unit = "tokens"
direction = "higher"
source = "engine"
counter = "llamacpp:tokens_predicted_total"
per = "llamacpp:n_decode_total"

[metrics.queue_free_ms]
unit = "ms"
direction = "lower"
source = "turns"
value = "ttft_ms - prompt_ms"
"""

JOBS = """\
import json, sys
print("pool up")
print(json.dumps({"time_per_job_ms": float(sys.argv[1])}))
"""

COMMAND_DESIGN = """\
name = "pool"
kind = "speed"
hypothesis = "the CPU-expert pool finishes a job sooner"
blocks = 5
primary_metric = "time_per_job_ms"

[arms.served]
command = ["{py}", "{jobs}", "41.2"]

[arms.candidate]
command = ["{py}", "{jobs}", "30.9"]

[rule]
kind = "sign"
alpha = 0.05
"""


def _command_campaign(root: Path) -> tuple[Campaign, Path]:
    c = make_campaign(root, TOML + METRICS)
    (c.root / "jobs.py").write_text(JOBS)
    path = c.root / "pool.toml"
    path.write_text(COMMAND_DESIGN.format(py=sys.executable, jobs=c.root / "jobs.py"))
    return c, path


def test_a_command_arm_metric_is_registered_analysed_plotted_and_exported_by_its_name(tmp_path: Path) -> None:
    c, path = _command_campaign(tmp_path / "c")
    reg = register(c, path)
    assert reg.frozen.direction == "lower" and reg.frozen.metrics["time_per_job_ms"].source == "command"
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.word == "confirmed" and a.verdict is not None
    assert [r.ratio_minus_one for r in a.verdict.rows] == [pytest.approx(30.9 / 41.2 - 1)] * 5
    assert "primary metric: time_per_job_ms (lower is better)" in "\n".join(format_analysis(a))
    (c.root / "frank.toml").write_text(TOML)  # the declaration gone from frank.toml: nothing registered changes
    c.store.close()
    with open_campaign(c.root) as again:
        a = analyze(again, reg.design_id)  # the design still reads its metric as registered
    doc = analysis_doc(a)
    assert doc["design"]["primary_metric"] == "time_per_job_ms"
    assert doc["design"]["units"] == {"time_per_job_ms": "ms"}
    assert doc["per_arm"]["time_per_job_ms"] == {"served": pytest.approx(41.2), "candidate": pytest.approx(30.9)}
    with open_campaign(c.root) as again:
        note = write_report(again, tmp_path / "out")
    text = note.read_text()
    assert "- Primary metric: `time_per_job_ms` (ms, a user metric: command; lower is better)." in text
    assert "`time_per_job_ms` in ms (wall time per recorded job shape of the CPU-expert pool)" in text
    assert (note.parent / f"{reg.design_id}-blocks.png").stat().st_size > 0  # its y axis: reg.label(...)
    assert reg.label("time_per_job_ms") == "time_per_job_ms (ms)" and reg.label("e2e_ms") == "e2e_ms (ms)"


def test_a_design_naming_an_unknown_metric_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    c, path = _command_campaign(tmp_path / "c")
    path.write_text(
        path.read_text().replace('primary_metric = "time_per_job_ms"', 'primary_metric = "time_per_jobs_ms"')
    )
    with pytest.raises(DesignError, match=r"pool\.toml: primary_metric: unknown metric 'time_per_jobs_ms' \(known: "):
        register(c, path)
    path.write_text(
        path.read_text().replace('"time_per_jobs_ms"', '"time_per_job_ms"\nsecondary = ["queue_free_ms", "nope_ms"]')
    )
    with pytest.raises(DesignError, match=r"pool\.toml: secondary\[1\]: unknown metric 'nope_ms'.*time_per_job_ms"):
        register(c, path)


def test_the_cli_refuses_an_unknown_metric_in_one_line_and_records_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, path = _command_campaign(tmp_path / "c")
    path.write_text(path.read_text().replace("secondary", "x").replace('"time_per_job_ms"', '"time_per_jobs_ms"'))
    c.store.close()
    code, out, err = cli(capsys, "register", str(path), "-c", str(tmp_path / "c"))
    assert (code, out) == (1, "")
    assert err.startswith(f"frank: error: {path}: primary_metric: unknown metric 'time_per_jobs_ms' (known: "), err
    assert "time_per_job_ms" in err and err.count("\n") == 1 and "Traceback" not in err
    with open_campaign(tmp_path / "c") as again:
        assert again.store.registry_rows() == []
        assert "unknown metric 'time_per_jobs_ms'" in (again.store.refusals(None)[-1].reason or "")


def test_a_metric_no_arm_can_produce_is_refused(tmp_path: Path) -> None:
    """A command arm's metric with engine arms, an engine counter with command arms: no start could produce it."""
    c, path = _command_campaign(tmp_path / "c")
    path.write_text(path.read_text().replace('"time_per_job_ms"', '"tokens_per_decode"'))
    with pytest.raises(DesignError, match=r"pool\.toml: primary_metric: arm served is a command arm, not an engine"):
        register(c, path)
    make_workload(c.root / "workloads" / "w.jsonl")
    engine = c.root / "engine.toml"
    engine.write_text(ENGINE_DESIGN.replace('"tokens_per_decode"', '"time_per_job_ms"'))
    with pytest.raises(DesignError, match=r"engine\.toml: primary_metric: arm served \(served\) is an engine recipe"):
        register(c, engine)


@pytest.mark.parametrize(
    ("table", "field", "says"),
    [
        ('[metrics.m]\nunit = "ms"\ndirection = "lower"\nsource = "engine"\n', "metrics.m.engine.counter", "Field required"),
        ('[metrics.m]\nunit = "ms"\ndirection = "down"\nsource = "command"\n', "metrics.m.command.direction", "'lower'"),
        ('[metrics.m]\nunit = "ms"\ndirection = "lower"\nsource = "command"\nlabel = "x"\n', "metrics.m.command.label",
         "unknown field"),
        ('[metrics.m]\nunit = "ms"\ndirection = "lower"\nsource = "turns"\nvalue = "ttft_ms - queue_ms"\n',
         "metrics.m.turns.value", "'queue_ms' is not a turn field"),
        ('[metrics.m]\nunit = "ms"\ndirection = "lower"\nsource = "turns"\nvalue = "__import__(\'os\')"\n',
         "metrics.m.turns.value", "only numbers, turn fields"),
        ('[metrics.m]\nunit = "ms"\ndirection = "lower"\nsource = "scrape"\n', "metrics.m", "source"),
        ('[metrics.e2e_ms]\nunit = "ms"\ndirection = "lower"\nsource = "command"\n', "metrics.e2e_ms",
         "a metric frank already defines"),
        ('[metrics.turns]\nunit = "n"\ndirection = "lower"\nsource = "command"\n', "metrics.turns",
         "a metric frank already defines"),
        ('[metrics."Bad Name"]\nunit = "ms"\ndirection = "lower"\nsource = "command"\n', "metrics.Bad Name",
         "not a metric name"),
    ],
)  # fmt: skip
def test_a_bad_metric_declaration_is_one_message_naming_frank_toml_and_the_field(
    tmp_path: Path, table: str, field: str, says: str
) -> None:
    path = tmp_path / "frank.toml"
    path.write_text(TOML + table)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: {field}: "), str(err.value)
    assert says in str(err.value)


def test_turn_values_and_engine_series_are_exact() -> None:
    assert turn_value("ttft_ms - prompt_ms", {"ttft_ms": 12.5, "prompt_ms": 10.0}) == 2.5
    assert (
        turn_value("(e2e_ms - ttft_ms) / (generated_tokens - 1)", {"e2e_ms": 50, "ttft_ms": 10, "generated_tokens": 1})
        is None
    )
    assert turn_value("ttft_ms - prompt_ms", {"ttft_ms": 12.5, "prompt_ms": None}) is None
    scrape = {'vllm:x_total{model="a",le="1"}': 3.0, 'vllm:x_total{model="b"}': 4.0, "vllm:y_total": 1.0}
    assert series(scrape, "vllm:x_total", {}) == 7.0
    assert series(scrape, "vllm:x_total", {"model": "a"}) == 3.0
    assert series(scrape, "vllm:x_total", {"model": "c"}) is None
    before, after = {"a_total": 10.0, "b_total": 2.0}, {"a_total": 70.0, "b_total": 22.0}
    cfg = load_config_text(METRICS)
    got = start_values(cfg, [{"warmup": 1, "ttft_ms": 1e6, "prompt_ms": 0.0}, {"ttft_ms": 9.0, "prompt_ms": 5.0}],
                       {}, {})  # fmt: skip
    assert got == {"tokens_per_decode": None, "queue_free_ms": 4.0}  # the engine's series absent: none
    from_engine = start_values({"t": cfg["tokens_per_decode"].model_copy(update={"counter": "a_total", "per": "b_total"})},
                               [], before, after)  # fmt: skip
    assert from_engine == {"t": 3.0}
    restarted = start_values({"t": cfg["tokens_per_decode"].model_copy(update={"counter": "a_total", "per": None})},
                             [], after, before)  # fmt: skip
    assert restarted == {"t": None}  # a counter that went down is no difference


def load_config_text(text: str) -> dict[str, Declared]:
    return dict(CampaignConfig.model_validate(tomllib.loads(text)).metrics)


ENGINE_DESIGN = """\
name = "decode"
kind = "screen"
hypothesis = "a smaller batch changes tokens per decode call"
blocks = 2
workload = "workloads/w.jsonl"
primary_metric = "tokens_per_decode"
secondary = ["queue_free_ms", "decode_ms_per_token"]

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["threads1"]

[rule]
kind = "all_blocks_better"
alpha = 0.25

[replay]
warmup_turns = 1
"""


@pytest.mark.usefixtures("llama_server_bin")
def test_an_engine_counter_from_a_real_llama_server_is_registered_and_analysed(tmp_path: Path) -> None:
    """llamacpp:tokens_predicted_total over llamacpp:n_decode_total, the difference between the scrapes around
    the replay of a real llama-server; and ttft_ms - prompt_ms from the stored turns."""
    c = make_campaign(tmp_path / "c", TOML + METRICS)
    make_workload(c.root / "workloads" / "w.jsonl", turns=3, tokens=8)
    (c.root / "decode.toml").write_text(ENGINE_DESIGN)
    reg = register(c, c.root / "decode.toml")
    assert reg.frozen.direction == "higher"
    run_design(c, reg.design_id, echo=lambda s: None)
    rows = c.store.starts_of(reg.design_id)
    assert len(rows) == 4 and all(r.ok for r in rows), [r.reason for r in rows]
    deltas = c.store.artifacts_of(reg.design_id, "metrics_delta.json")
    for r in rows:
        delta = json.loads(deltas[r.id])
        want = delta["llamacpp:tokens_predicted_total"] / delta["llamacpp:n_decode_total"]
        assert r.metrics["tokens_per_decode"] == pytest.approx(want) and want > 0
        turns = [t for t in c.store.turns_of(r.id) if not t["warmup"]]
        queue = sum(t["ttft_ms"] - t["prompt_ms"] for t in turns) / len(turns)
        assert r.metrics["queue_free_ms"] == pytest.approx(queue)
    a = analyze(c, reg.design_id)
    assert a.blocks_done == 2 and set(a.per_block) == {"tokens_per_decode", "queue_free_ms", "decode_ms_per_token"}
    assert analysis_doc(a)["design"]["units"] == {
        "tokens_per_decode": "tokens",
        "queue_free_ms": "ms",
        "decode_ms_per_token": "ms",
    }
    text = write_report(c, tmp_path / "out").read_text()
    assert "`tokens_per_decode` (tokens, a user metric: engine; higher is better)" in text
    assert "`queue_free_ms`" in text


@pytest.mark.usefixtures("llama_server_bin")
def test_frank_replay_prints_and_records_the_user_metrics_a_replay_can_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_campaign(tmp_path / "c", TOML + METRICS)
    make_workload(c.root / "workloads" / "w.jsonl", turns=3, tokens=8)
    c.store.close()
    code, out, err = cli(capsys, "replay", "base", str(c.root / "workloads" / "w.jsonl"), "-c", str(c.root))
    assert code == 0, err
    lines = {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()
        if line.startswith("  ") and len(line.split()) == 2
    }
    assert float(lines["tokens_per_decode"]) > 0 and lines["queue_free_ms"] != "-"
    assert "time_per_job_ms" not in lines  # a command arm's metric: no replay gives it
    with open_campaign(c.root) as again:
        (row,) = again.store.query("SELECT metrics FROM starts")
        assert json.loads(row["metrics"])["tokens_per_decode"] == pytest.approx(float(lines["tokens_per_decode"]), 1e-3)


def test_a_signed_user_metric_is_refused_as_the_primary_metric_of_a_ratio_rule(tmp_path: Path) -> None:
    """``signed = true``: the metric may be zero or negative, so a rule testing per-block ratios refuses it."""
    c = make_campaign(
        tmp_path / "c",
        TOML + METRICS.replace('value = "ttft_ms - prompt_ms"', 'value = "ttft_ms - prompt_ms"\nsigned = true'),
    )
    make_workload(c.root / "workloads" / "w.jsonl")
    path = c.root / "engine.toml"
    path.write_text(ENGINE_DESIGN.replace('primary_metric = "tokens_per_decode"', 'primary_metric = "queue_free_ms"'))
    with pytest.raises(DesignError, match=r"engine\.toml: primary_metric: 'queue_free_ms' can be zero or negative"):
        register(c, path)
