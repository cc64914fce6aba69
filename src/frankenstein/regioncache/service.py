"""``frank serve``: the served recipe behind the region-cache front, optionally recording turns.

    client ──► front (counts from the cache) ──► [recording proxy, --record] ──► engine

The engine is the campaign's served recipe (base recipe + parts the ledger adopted), started with
``frankenstein.engines.start_engine`` and always reaped; ``--upstream URL`` fronts an engine that is
already running instead. Before serving, the tokenizer is checked against the engine's own
``/tokenize`` on a few probe texts: a tokenizer that does not match the model would give wrong
counts, so it is refused with a message naming both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from frankenstein.campaign import open_campaign
from frankenstein.design.registry import verified
from frankenstein.engines import start_engine
from frankenstein.errors import ConfigError, FrankError
from frankenstein.regioncache.cache import DEFAULT_MAX_BYTES, RegionCache, load_tokenizer
from frankenstein.regioncache.proxy import Front, start_front
from frankenstein.regioncache.render import ChatTemplate, Renderer, engine_template, find_template
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


def default_tokenizer(model: str) -> Path:
    """``tokenizer.json`` beside the model; the shipped tiny models use the shipped tiny tokenizer."""
    path = Path(model)
    if path.parent == data_path("tiny-tokenizer.json").parent and path.name.startswith("tiny-"):
        return data_path("tiny-tokenizer.json")
    beside = path.parent / "tokenizer.json"
    if beside.is_file():
        return beside
    raise ConfigError(f"no tokenizer.json beside the model {model}; pass --tokenizer PATH", field="--tokenizer")


def check_tokenizer(cache: RegionCache, upstream: str, tokenizer_path: Path) -> str:
    """Compare with the engine's ``/tokenize``; a mismatch is a FrankError, a missing endpoint a note."""
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
                raise FrankError(
                    f"--tokenizer {tokenizer_path} does not match the engine's tokenizer: {probe!r} "
                    f"is {ours} here and {theirs} in the engine"
                )
    return "tokenizer matches the engine's /tokenize"


@contextmanager
def serving(opts: ServeOptions, echo: Callable[[str], None] = print) -> Iterator[Front]:
    """Start engine (unless ``upstream``), recorder (with ``record``) and front; stop all on exit."""
    host, port = parse_listen(opts.listen)
    with ExitStack() as stack:
        upstream, model = _upstream(opts, stack)
        tok_path = opts.tokenizer or default_tokenizer(model or "")
        cache = RegionCache(
            load_tokenizer(tok_path),
            max_bytes=opts.max_bytes,
            shadow_rate=opts.shadow_rate,
            on_disable=lambda why: echo(f"frank serve: region cache disabled: {why}"),
        )
        checked = check_tokenizer(cache, upstream, tok_path)
        engine = upstream
        if opts.record is not None:
            upstream = _recorder(upstream, opts.record, stack)
        renderer = Renderer(_engine_props_template(engine) or find_template(tok_path, Path(model) if model else None))
        front = start_front(upstream, cache, renderer=renderer, host=host, port=port)
        stack.callback(front.shutdown)
        st = cache.status()
        recording = f" (recording turns to {opts.record})" if opts.record else ""
        echo(f"frank serve: listening on {front.url} -> {engine}{recording}")
        echo(f"region cache: {'on' if st.enabled else 'off'} ({st.reason}); {checked}; count_tokens by {renderer.how}")
        yield front


def _engine_props_template(url: str) -> ChatTemplate | None:
    try:
        r = httpx.get(url + "/props", timeout=30.0, trust_env=False)
        return engine_template(r.json()) if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _upstream(opts: ServeOptions, stack: ExitStack) -> tuple[str, str | None]:
    if opts.upstream:
        return opts.upstream.rstrip("/"), None
    campaign = stack.enter_context(open_campaign(opts.campaign))
    verified(campaign, "serve")  # a ledger row written outside frank must not change what is served
    recipe = served_recipe(campaign)
    engine = stack.enter_context(start_engine(recipe, campaign.logs))
    return engine.base_url, recipe.model


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
