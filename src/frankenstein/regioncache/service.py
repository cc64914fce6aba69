"""``frank serve``: the served recipe behind the region-cache front, optionally recording turns.

    client ──► front (counts from the cache) ──► [recording proxy, --record] ──► engine

The engine is the campaign's served recipe (base recipe + parts the ledger adopted), started with
``frankenstein.engines.start_engine`` and always reaped; ``--upstream URL`` fronts an engine that is
already running instead. Before serving, the tokenizer is checked against the engine's own
``/tokenize`` on a few probe texts: a tokenizer that does not match the model would give wrong
counts, so it is refused with a message naming both.

The tokenizer (:func:`choose_tokenizer`): ``--tokenizer``, else ``tokenizer.json`` beside the model
(the model file is the recipe's, or with ``--upstream`` the one llama.cpp's ``/props`` names), else one
rebuilt from the model's GGUF metadata (:mod:`.gguf`). Where none can be had, or a rebuilt one
disagrees with the engine on the probes, counts come from the engine's own ``/tokenize``
(:class:`.engine_count.EngineCounter`) and the cache is off, with the reason printed.

Serving the campaign's recipe, every answered request is kept as an observation tagged with the ledger
step served (:mod:`.observe`; ``frank report`` prints them per step, as observations).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tokenizers import Tokenizer

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.design.registry import verified
from frankenstein.engines import start_engine
from frankenstein.errors import ConfigError, FrankError
from frankenstein.regioncache.cache import DEFAULT_MAX_BYTES, RegionCache, load_tokenizer
from frankenstein.regioncache.engine_count import EngineCounter
from frankenstein.regioncache.gguf import Unsupported, gguf_tokenizer
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.proxy import Counter, Front, start_front
from frankenstein.regioncache.render import Renderer, engine_template, find_template
from frankenstein.served import served_recipe
from frankenstein.shipped import data_path
from frankenstein.workload.record import serve_recorder

PROBES = (
    "Hello world\n",
    "def f(x):\n    return x  # ok\n\n\n<|im_start|>user\nhi<|im_end|>\n",
    "数字 123456 😀\r\n\ttab  \u00a0 end",
)


@dataclass(frozen=True)
class ServeOptions:
    campaign: Path = Path(".")
    listen: str = "127.0.0.1:8088"
    tokenizer: Path | None = None
    record: Path | None = None
    upstream: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    shadow_rate: float = 0.0


def parse_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError as exc:
        raise FrankError(f"--listen {value!r}: expected HOST:PORT") from exc


def beside_tokenizer(model: str) -> Path | None:
    """``tokenizer.json`` beside the model; the shipped tiny models use the shipped tiny tokenizer."""
    path = Path(model)
    if path.parent == data_path("tiny-tokenizer.json").parent and path.name.startswith("tiny-"):
        return data_path("tiny-tokenizer.json")
    beside = path.parent / "tokenizer.json"
    return beside if beside.is_file() else None


@dataclass(frozen=True)
class TokenizerChoice:
    """The tokenizer to count with (None: count through the engine), its file, and where it came from."""

    tokenizer: Tokenizer | None
    path: Path | None
    source: str
    explicit: bool = False


def choose_tokenizer(explicit: Path | None, model: str | None) -> TokenizerChoice:
    """See the module docstring; ``model`` is the served model file, when known."""
    if explicit is not None:
        return TokenizerChoice(load_tokenizer(explicit), explicit, f"--tokenizer {explicit}", explicit=True)
    if not model:
        return TokenizerChoice(None, None, "the engine names no model file and no --tokenizer was given")
    beside = beside_tokenizer(model)
    if beside is not None:
        return TokenizerChoice(load_tokenizer(beside), beside, str(beside))
    if model.endswith(".gguf") and Path(model).is_file():
        try:
            return TokenizerChoice(gguf_tokenizer(model), None, f"rebuilt from the GGUF metadata of {Path(model).name}")
        except Unsupported as exc:
            return TokenizerChoice(None, None, f"no tokenizer.json beside the model, and {exc}")
    return TokenizerChoice(None, None, f"no tokenizer.json beside the model {model}")


class Mismatch(FrankError):
    """The tokenizer counts differently from the engine on a probe."""


def check_tokenizer(cache: Counter, upstream: str, label: str) -> str:
    """Compare with the engine's ``/tokenize``; a mismatch is a :class:`Mismatch` (``label`` names the
    tokenizer), a missing endpoint a note."""
    with httpx.Client(timeout=30.0, trust_env=False) as client:
        for probe in PROBES:
            try:
                r = client.post(upstream + "/tokenize", json={"content": probe})
            except httpx.HTTPError as exc:
                raise FrankError(f"engine at {upstream} did not answer /tokenize: {exc}") from exc
            if r.status_code == 404:
                return "engine has no /tokenize: tokenizer not checked against it"
            theirs = r.json().get("tokens")
            ours = cache.encode(probe, add_special_tokens=False)
            if theirs != ours:
                raise Mismatch(
                    f"{label} does not match the engine's tokenizer: {probe!r} "
                    f"is {ours} here and {theirs} in the engine"
                )
    return "tokenizer matches the engine's /tokenize"


@contextmanager
def serving(opts: ServeOptions, echo: Callable[[str], None] = print) -> Iterator[Front]:
    """Start engine (unless ``upstream``), recorder (with ``record``) and front; stop all on exit."""
    host, port = parse_listen(opts.listen)
    with ExitStack() as stack:
        upstream, model, campaign = _upstream(opts, stack)
        props = _engine_props(upstream)
        model = model or _props_model(props)
        choice = choose_tokenizer(opts.tokenizer, model)
        cache, checked = _counter(opts, choice, upstream, echo)
        engine = upstream
        if opts.record is not None:
            upstream = _recorder(upstream, opts.record, stack)
        template = engine_template(props) if props else None
        renderer = Renderer(template or find_template(choice.path, Path(model) if model else None))
        observe = _observe(campaign, stack)
        front = start_front(upstream, cache, renderer=renderer, host=host, port=port, observe=observe)
        stack.callback(front.shutdown)
        st = cache.status()
        recording = f" (recording turns to {opts.record})" if opts.record else ""
        echo(f"frank serve: listening on {front.url} -> {engine}{recording}")
        echo(f"region cache: {'on' if st.enabled else 'off'} ({st.reason}); {checked}; count_tokens by {renderer.how}")
        yield front


def _counter(
    opts: ServeOptions, choice: TokenizerChoice, upstream: str, echo: Callable[[str], None]
) -> tuple[Counter, str]:
    """The region cache over the chosen tokenizer, checked against the engine; else the engine's counts."""
    if choice.tokenizer is not None:
        cache = RegionCache(
            choice.tokenizer,
            max_bytes=opts.max_bytes,
            shadow_rate=opts.shadow_rate,
            on_disable=lambda why: echo(f"frank serve: region cache disabled: {why}"),
        )
        try:
            return cache, f"tokenizer {choice.source}; " + check_tokenizer(cache, upstream, choice.source)
        except Mismatch as exc:
            if choice.explicit:
                raise
            why = f"the tokenizer {choice.source} differs from the engine's ({exc})"  # rebuilt or beside
    else:
        why = choice.source
    if not _has_tokenize(upstream):
        raise ConfigError(f"{why}, and the engine has no /tokenize; pass --tokenizer PATH", field="--tokenizer")
    return EngineCounter(upstream, why), "counts are the engine's own /tokenize"


def _has_tokenize(upstream: str) -> bool:
    try:
        r = httpx.post(upstream + "/tokenize", json={"content": "a"}, timeout=30.0, trust_env=False)
    except httpx.HTTPError as exc:
        raise FrankError(f"engine at {upstream} did not answer /tokenize: {exc}") from exc
    return r.status_code == 200


def _engine_props(url: str) -> dict[str, Any] | None:
    """llama.cpp's ``GET /props`` (chat template, model file), or None from another engine."""
    try:
        r = httpx.get(url + "/props", timeout=30.0, trust_env=False)
        data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _props_model(props: dict[str, Any] | None) -> str | None:
    path = (props or {}).get("model_path")
    return path if isinstance(path, str) and path else None


def _upstream(opts: ServeOptions, stack: ExitStack) -> tuple[str, str | None, Campaign | None]:
    if opts.upstream:
        return opts.upstream.rstrip("/"), None, None
    campaign = stack.enter_context(open_campaign(opts.campaign))
    verified(campaign, "serve")  # a ledger row written outside frank must not change what is served
    recipe = served_recipe(campaign)
    engine = stack.enter_context(start_engine(recipe, campaign.logs))
    return engine.base_url, recipe.model, campaign


def _observe(campaign: Campaign | None, stack: ExitStack) -> ServedLog | None:
    """Observations of the served traffic, tagged with the last ledger step (the one being served)."""
    if campaign is None:
        return None
    last = campaign.store.last_steps(1)
    log = ServedLog(campaign.store, last[0].seq if last else None)
    stack.callback(log.close)
    return log


def _recorder(upstream: str, out: Path, stack: ExitStack) -> str:
    rec = serve_recorder(upstream, "127.0.0.1", 0, out)
    stack.callback(rec.shutdown)
    return rec.url


def serve_until_interrupted(opts: ServeOptions, echo: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C/SIGTERM (raised as KeyboardInterrupt by the CLI); everything is stopped."""
    stop = threading.Event()
    with serving(opts, echo):
        while not stop.wait(1.0):
            pass
