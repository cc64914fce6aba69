"""Engine facts live on the adapters (``EngineTraits``) and are read through ``engines.traits_of``: no module
outside ``engines/`` names an engine; ``/metrics`` scrapes keep their labels."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design.kinds.base import drafts
from frankenstein.design.pins import model_files
from frankenstein.engines import ADAPTERS, process_names, register_adapter, tokenize_dialects, traits_of
from frankenstein.engines.openai import OpenAIEngine
from frankenstein.engines.prometheus import Sample, Scrapes, counter_deltas, delta, parse_samples, value_of
from frankenstein.engines.traits import LLAMACPP_TOKENIZE, NO_TRAITS, OPENAI_TOKENIZE
from frankenstein.shipped import data_path

SRC = Path(__file__).resolve().parents[1] / "src" / "frankenstein"

# Modules outside engines/ that may hold such a word, each with why it is not an engine choice.
NAMING_ALLOWED = {
    "config.py": "frank.toml's default engine and the shape of an external recipe (ground floor, below engines/)",
    "cli/workload.py": "import sources named after the tools whose files they read (openai, vllm, sharegpt)",
    "workload/importers.py": "the same import sources",
    "workload/export.py": "export formats named after the peer tools (aiperf, vllm bench)",
}


def _engine_words() -> set[str]:
    words = set(ADAPTERS) | set(process_names()) | {cls.kind for cls in ADAPTERS.values()}
    return words | {"llama.cpp", "llama_cpp"}


def test_nothing_outside_engines_names_an_engine() -> None:
    """A string that is an engine's name (table key, adapter kind or process name) appears in code only in
    ``engines/`` (docstrings and comments may mention engines; the listed modules use the words for other things)."""
    words, found = _engine_words(), []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC).as_posix()
        if rel.startswith("engines/") or rel in NAMING_ALLOWED:
            continue
        tree = ast.parse(f.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if _has_docstring(n)}
        found += [
            f"{rel}:{n.lineno} {n.value!r}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in words and id(n) not in docs
        ]
    assert found == []


def _has_docstring(n: ast.AST) -> bool:
    if not isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) or not n.body:
        return False
    first = n.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)


def test_the_scan_would_see_an_engine_named_outside() -> None:
    """The scan above is not vacuous: the comparison it exists to catch is found."""
    tree = ast.parse('if recipe.engine == "llamacpp":\n    pass\n')
    assert [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in _engine_words()] == [
        "llamacpp"
    ]


def _recipe(engine: str, args: list[str], **kw: object) -> ResolvedRecipe:
    return ResolvedRecipe(name="r", engine=engine, model=kw.pop("model", ""), args=args, env={}, **kw)  # type: ignore[arg-type]


def test_speculative_flags_are_each_engines_own() -> None:
    assert drafts(_recipe("llamacpp", ["-md", "d.gguf"])) and drafts(_recipe("llamacpp", ["--draft-max=8"]))
    assert drafts(_recipe("vllm", ["--speculative-config", "{}"])) and drafts(
        _recipe("sglang", ["--speculative-algorithm=EAGLE"])
    )
    assert not drafts(_recipe("vllm", ["-md", "d.gguf"]))  # llama.cpp's flag means nothing to vLLM
    assert not drafts(_recipe("openai", ["--speculative-config"])) and not drafts(_recipe("nosuch", ["-md", "x"]))


def test_launch_problems_and_draft_models_are_llamacpps(tmp_path: Path) -> None:
    """A missing model file is llama.cpp's launch problem (registration refuses it); a vLLM model is a hub name."""
    missing = str(tmp_path / "nope.gguf")
    assert traits_of("llamacpp").launch_problem(_recipe("llamacpp", [], model=missing)) == (
        f"model file {missing} does not exist"
    )
    assert traits_of("vllm").launch_problem(_recipe("vllm", [], model="org/model")) is None
    assert traits_of("llamacpp").launch_problem(_recipe("llamacpp", [], model=missing, command=["x"])) is None
    draft = str(data_path("tiny-draft.gguf"))
    target = str(data_path("tiny-target.gguf"))
    roles = [role for role, _ in model_files(_recipe("llamacpp", ["-md", draft], model=target))]
    assert roles == ["model", "draft model"]
    assert [role for role, _ in model_files(_recipe("vllm", ["-md", draft], model=target))] == ["model"]


def test_each_trait_is_read_from_the_table() -> None:
    assert traits_of("nosuch") is NO_TRAITS and traits_of("openai") is OpenAIEngine.traits
    assert traits_of("external").launched is False and traits_of("external").fresh_starts is False
    assert all(traits_of(n).launched and traits_of(n).fresh_starts for n in ("llamacpp", "vllm", "sglang", "openai"))
    assert traits_of("llamacpp").tokenize is LLAMACPP_TOKENIZE and traits_of("sglang").tokenize is OPENAI_TOKENIZE
    assert tokenize_dialects()[:2] == (LLAMACPP_TOKENIZE, OPENAI_TOKENIZE)  # probed in this order
    assert {"llama-server", "vllm", "sglang"} <= set(process_names())
    assert traits_of("vllm").sets("VLLM_USE_V1") and not traits_of("vllm").sets("VLLM")
    assert traits_of("external").program(_recipe("external", ["--url", "http://127.0.0.1:1"])) is None


def test_a_taken_engine_name_is_refused() -> None:
    with pytest.raises(ValueError, match="engine 'vllm' is already VllmEngine"):
        register_adapter("vllm", OpenAIEngine)
    assert ADAPTERS["vllm"].__name__ == "VllmEngine"


SCRAPE = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="a b"} 40.0
vllm:generation_tokens_total{engine="1",model_name="q\\"x\\\\y"} 2 1700000000000
vllm:request_success_total{finished_reason="stop",} 3
llamacpp:n_decode_total 7
bad line here
"""


def test_a_scrape_keeps_each_samples_labels() -> None:
    samples = parse_samples(SCRAPE)
    assert samples[:2] == [
        Sample("vllm:generation_tokens_total", {"engine": "0", "model_name": "a b"}, 40.0),
        Sample("vllm:generation_tokens_total", {"engine": "1", "model_name": 'q"x\\y'}, 2.0),  # escapes, timestamp
    ]
    assert samples[2].labels == {"finished_reason": "stop"} and samples[3] == Sample("llamacpp:n_decode_total", {}, 7.0)
    assert len(samples) == 4  # comments and a line that is no sample are left out
    assert value_of(samples, "vllm:generation_tokens_total") == 42.0
    assert value_of(samples, "vllm:generation_tokens_total", {"engine": "1"}) == 2.0
    assert value_of(samples, "vllm:generation_tokens_total", {"engine": "9"}) is None


def test_two_scrapes_give_labelled_deltas_and_survive_the_store_form() -> None:
    before = parse_samples(SCRAPE)
    after = parse_samples(SCRAPE.replace(" 40.0", " 50.0").replace("n_decode_total 7", "n_decode_total 9"))
    scrapes = Scrapes(before, after)
    assert delta(before, after, "vllm:generation_tokens_total", {"engine": "0"}) == 10.0
    assert scrapes.delta("llamacpp:n_decode_total") == 2.0 and scrapes.delta("nosuch") is None
    assert counter_deltas(scrapes) == {
        'vllm:generation_tokens_total{engine="0",model_name="a b"}': 10.0,
        "llamacpp:n_decode_total": 2.0,
    }
    assert Scrapes.from_json(scrapes.to_json()) == scrapes
