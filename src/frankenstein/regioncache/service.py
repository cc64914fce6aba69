"""``frank serve``: the served recipe behind the region-cache front, optionally recording turns.

    client ──► front (counts from the cache) ──► [recording proxy, --record] ──► engine

The engine is the campaign's served recipe as the last adopt froze it (:mod:`frankenstein.design.serving`:
refused when frank.toml or a pinned file now disagrees, unless forced and recorded), started with
``frankenstein.engines.start_engine`` and always reaped; ``--upstream URL`` fronts an engine that is
already running instead. Before serving, the tokenizer is checked against the engine's own
``/tokenize`` on a few probe texts, with and without special tokens: a tokenizer that does not match
the model would give wrong counts, so it is refused with a message naming both. The engine's
``/tokenize`` is spoken in its own dialect (llama.cpp's or vLLM/SGLang's), found once at start
(:mod:`.tokenize_api`).

The tokenizer (:func:`choose_tokenizer`): ``--tokenizer``, else the model's ``tokenizer.json``
(:func:`beside_tokenizer`: inside a model directory, beside a model file; the model is the recipe's,
or with ``--upstream`` the one the engine names: llama.cpp's ``/props`` ``model_path``, vLLM's and
SGLang's ``/v1/models`` ``root``), else one rebuilt from the model's GGUF metadata (:mod:`.gguf`).
Where none can be had, or a rebuilt one disagrees with the engine on the probes, counts come from the
engine's own ``/tokenize`` (:class:`.engine_count.EngineCounter`) and the cache is off, with the
reason printed.

Serving the campaign's recipe, every answered request is kept as an observation tagged with the ledger
step served (:mod:`.observe`; ``frank report`` prints them per step, as observations). With
``--upstream`` that happens only when ``--campaign`` is given: the user says that engine serves the
campaign's served step; an engine that names a model other than the served recipe's is refused.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tokenizers import Tokenizer

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.design.registry import verified
from frankenstein.design.serving import Served, checked
from frankenstein.engines import start_engine, traits_of
from frankenstein.engines.external import listed_model
from frankenstein.errors import ConfigError, FrankError
from frankenstein.regioncache.admission import Admission, OverScope
from frankenstein.regioncache.cache import DEFAULT_MAX_BYTES, RegionCache, load_tokenizer
from frankenstein.regioncache.engine_count import EngineCounter
from frankenstein.regioncache.gguf import Unsupported, gguf_tokenizer
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.proxy import Counter, Front, start_front
from frankenstein.regioncache.render import Renderer, engine_template, find_template
from frankenstein.regioncache.tokenize_api import TokenizeApi, find_tokenize
from frankenstein.scope import adopted_for, scope_words, served_adoptions, served_scope
from frankenstein.shipped import data_path
from frankenstein.validation import listen_address
from frankenstein.workload.listener import MAX_BODY_BYTES
from frankenstein.workload.record import serve_recorder

PROBES = (
    "Hello world\n",
    "def f(x):\n    return x  # ok\n\n\n<|im_start|>user\nhi<|im_end|>\n",
    "数字 123456 😀\r\n\ttab  \u00a0 end",
)


@dataclass(frozen=True)
class ServeOptions:
    campaign: Path | None = None  # None: "." when frank starts the engine; no observations with ``upstream``
    listen: str = "127.0.0.1:8088"
    tokenizer: Path | None = None
    record: Path | None = None
    upstream: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    shadow_rate: float = 0.0
    over_scope: OverScope = "queue"  # past the served recipe's adopted concurrency: queue or refuse (429)
    force: bool = False  # serve although the campaign disagrees with the frozen recipe (recorded, with ``why``)
    why: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES  # a larger request body is answered 413 (front and recorder)


def parse_listen(value: str) -> tuple[str, int]:
    """``--listen`` (:func:`frankenstein.validation.listen_address`), a FrankError naming the option."""
    try:
        return listen_address(value)
    except ValueError as exc:
        raise FrankError(f"--listen {exc}") from exc


def beside_tokenizer(model: str) -> Path | None:
    """The model's ``tokenizer.json``: inside the model when it is a directory (a Hugging Face model
    folder, what vLLM and SGLang serve), beside it when it is a file (a GGUF); the shipped tiny models
    use the shipped tiny tokenizer."""
    path = Path(model)
    if path.parent == data_path("tiny-tokenizer.json").parent and path.name.startswith("tiny-"):
        return data_path("tiny-tokenizer.json")
    beside = (path if path.is_dir() else path.parent) / "tokenizer.json"
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
    where = "in the model directory" if Path(model).is_dir() else "beside the model"
    return TokenizerChoice(None, None, f"no tokenizer.json {where} {model}")


class Mismatch(FrankError):
    """The tokenizer counts differently from the engine on a probe."""


def check_tokenizer(cache: Counter, api: TokenizeApi | None, label: str) -> str:
    """Compare with the engine's ``/tokenize`` (with and without special tokens); a mismatch is a
    :class:`Mismatch` (``label`` names the tokenizer), a missing endpoint a note."""
    if api is None:
        return "engine has no /tokenize: tokenizer not checked against it"
    for probe, special in [(p, False) for p in PROBES] + [(PROBES[0], True)]:
        theirs = api.encode(probe, add_special_tokens=special)
        ours = cache.encode(probe, add_special_tokens=special)
        if theirs != ours:
            with_special = " with special tokens" if special else ""
            raise Mismatch(
                f"{label} does not match the engine's tokenizer: {probe!r}{with_special} "
                f"is {ours} here and {theirs} in the engine"
            )
    return f"tokenizer matches the engine's /tokenize ({api.dialect.name} dialect)"


@contextmanager
def serving(opts: ServeOptions, echo: Callable[[str], None] = print) -> Iterator[Front]:
    """Start engine (unless ``upstream``), recorder (with ``record``) and front; stop all on exit."""
    host, port = parse_listen(opts.listen)
    with ExitStack() as stack:
        upstream, engine_kind, recipe_model, campaign, served = _upstream(opts, stack, echo)
        props = _engine_props(upstream)
        model = _engine_model(upstream, props) or recipe_model
        fronting = _fronting(campaign, model, recipe_model) if opts.upstream and campaign is not None else None
        choice = choose_tokenizer(opts.tokenizer, model)
        api = find_tokenize(upstream, traits_of(engine_kind).tokenize if engine_kind else None)
        cache, checked = _counter(opts, choice, api, echo)
        engine = upstream
        if opts.record is not None:
            upstream = _recorder(upstream, opts.record, opts.max_body_bytes, stack)
        template = engine_template(props) if props else None
        renderer = Renderer(template or find_template(choice.path, Path(model) if model else None))
        observe = _observe(campaign, stack)
        admission = _admission(campaign, opts.over_scope)
        context = served_scope(campaign.store.ledger_steps(), "context")[0] if campaign is not None else None
        front = start_front(
            upstream,
            cache,
            renderer=renderer,
            host=host,
            port=port,
            observe=observe,
            admission=admission,
            context_scope=context if observe is not None else None,
            max_body_bytes=opts.max_body_bytes,
        )
        stack.callback(front.shutdown)
        st = cache.status()
        recording = f" (recording turns to {opts.record})" if opts.record else ""
        echo(f"frank serve: listening on {front.url} -> {engine}{recording}")
        echo(f"region cache: {'on' if st.enabled else 'off'} ({st.reason}); {checked}; count_tokens by {renderer.how}")
        if fronting:
            echo(fronting)
        if admission is not None:
            echo(admission.describe())
        for line in [*_scope_lines(campaign), *served_words(served, observe)]:
            echo(line)
        yield front


def _counter(
    opts: ServeOptions, choice: TokenizerChoice, api: TokenizeApi | None, echo: Callable[[str], None]
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
            return cache, f"tokenizer {choice.source}; " + check_tokenizer(cache, api, choice.source)
        except Mismatch as exc:
            if choice.explicit:
                raise
            why = f"the tokenizer {choice.source} differs from the engine's ({exc})"  # rebuilt or beside
    else:
        why = choice.source
    if api is None:
        raise ConfigError(f"{why}, and the engine has no /tokenize; pass --tokenizer PATH", field="--tokenizer")
    return EngineCounter(api, why), f"counts are the engine's own /tokenize ({api.dialect.name} dialect)"


def _engine_props(url: str) -> dict[str, Any] | None:
    """llama.cpp's ``GET /props`` (chat template, model file), or None from another engine."""
    try:
        r = _get(url + "/props")
        data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _get(url: str) -> httpx.Response:
    """A GET to the engine; an ``https://`` one checked as the proxies' upstream client checks it (the default
    context: the system's CAs, or ``SSL_CERT_FILE``), not by httpx's own CA bundle."""
    return httpx.get(url, timeout=30.0, trust_env=False, verify=ssl.create_default_context())


def _engine_model(url: str, props: dict[str, Any] | None) -> str | None:
    """The model the engine names: llama.cpp's ``/props`` ``model_path``, else the ``root`` of the
    first model in ``/v1/models`` (vLLM and SGLang: the path they were started with) when it is a
    local path (a hub name is not)."""
    path = (props or {}).get("model_path")
    if isinstance(path, str) and path:
        return path
    try:
        r = _get(url + "/v1/models")
        root = listed_model(r.json()) if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return root if root and Path(root).exists() else None


def _upstream(
    opts: ServeOptions, stack: ExitStack, echo: Callable[[str], None] = print
) -> tuple[str, str | None, str | None, Campaign | None, Served | None]:
    """(engine URL, engine kind when frank starts it, the model, the campaign whose step is served, the served
    recipe). ``--upstream`` with ``--campaign``: the campaign is opened (and verified) only to tag observations."""
    if opts.upstream and opts.campaign is None:
        return opts.upstream.rstrip("/"), None, None, None, None
    campaign = stack.enter_context(open_campaign(opts.campaign or Path(".")))
    verified(campaign, "serve", force=opts.force, why=opts.why)  # a ledger row written outside frank changes nothing
    served = checked(campaign, "serve", force=opts.force, why=opts.why)  # the recipe adopt froze, as tested
    if served.problems:  # forced: it was recorded; say so before anything starts
        echo(
            f"warning: the served recipe ({served.why}) disagrees with this campaign now ({'; '.join(served.problems)}); "
            f"serving it as frozen because --force --why {opts.why!r} (recorded as an override)"
        )
    recipe = served.recipe
    if opts.upstream:
        return opts.upstream.rstrip("/"), None, recipe.model, campaign, served
    engine = stack.enter_context(start_engine(recipe, campaign.logs))
    return engine.base_url, recipe.engine, recipe.model, campaign, served


def served_words(served: Served | None, observe: ServedLog | None) -> list[str]:
    """On start: the recipe served and its ledger step; where the access log goes."""
    lines = []
    if served is not None:
        lines.append(f"frank serve: serving {' + '.join([served.base, *served.parts])}, {served.why}")
    if observe is not None and observe.access is not None:
        lines.append(f"frank serve: access log {observe.access} (time, route, status, ms per request; no bodies)")
    return lines


def _fronting(campaign: Campaign, model: str | None, served_model: str | None) -> str:
    """An ``--upstream`` engine is taken to serve the campaign's served recipe (``served_model``); one that
    names another model is refused, so its traffic is never filed under a step it did not serve."""
    if model and served_model and not _same_path(model, served_model):
        raise ConfigError(
            f"the engine at --upstream serves {model}, not the served recipe's model {served_model}; "
            "its traffic cannot be observed under this campaign's ledger step (leave out --campaign)",
            field="--campaign",
        )
    step = campaign.store.last_steps(1)
    at = f"ledger step {step[0].seq}" if step else "the base recipe (no ledger step yet)"
    return f"frank serve: observations kept in {campaign.root}, tagged with {at} (the --upstream engine serves it)"


def _same_path(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _observe(campaign: Campaign | None, stack: ExitStack) -> ServedLog | None:
    """Observations of the served traffic, tagged with the last ledger step (the one being served), and the
    access log in the campaign's logs/ (:func:`access_log_path`)."""
    if campaign is None:
        return None
    last = campaign.store.last_steps(1)
    log = ServedLog(campaign.store, last[0].seq if last else None, access=access_log_path(campaign))
    stack.callback(log.close)
    return log


def access_log_path(campaign: Campaign) -> Path:
    """logs/serve-access-<UTC start time>.log: one file per ``frank serve``."""
    return campaign.logs / f"serve-access-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.log"


def _admission(campaign: Campaign | None, mode: OverScope) -> Admission | None:
    """The served recipe's adopted concurrency (``frank adopt --scope concurrency=N``), held by the front;
    None when no served part was adopted with one (or no campaign is served)."""
    if campaign is None:
        return None
    limit, steps = served_scope(campaign.store.ledger_steps())
    if limit is None:
        return None
    where = ", ".join(f"step {e.seq} ({e.part})" for e in steps)
    return Admission(limit, mode, f"adopted for concurrency {limit} (ledger {where})")


def _scope_lines(campaign: Campaign | None) -> list[str]:
    """What each served part was adopted for (``adopt --scope``), said on start: only ``concurrency`` is held."""
    if campaign is None:
        return []
    lines = []
    for e in served_adoptions(campaign.store.ledger_steps()):
        words = scope_words(adopted_for(e))
        if words:
            lines.append(f"frank serve: {e.part} (ledger step {e.seq}) is adopted for {words}")
    if lines:
        lines.append(
            "frank serve: of these, concurrency is held here; a prompt longer than the context is kept as an "
            "observation outside scope (counted with the cache); the others are the adopters' words"
        )
    return lines


def _recorder(upstream: str, out: Path, max_body_bytes: int, stack: ExitStack) -> str:
    """The recording proxy between the front and the engine; it takes the bodies the front takes (--max-body-mb)."""
    rec = serve_recorder(upstream, "127.0.0.1", 0, out, max_body_bytes=max_body_bytes)
    stack.callback(rec.shutdown)
    return rec.url


def serve_until_interrupted(opts: ServeOptions, echo: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C/SIGTERM (raised as KeyboardInterrupt by the CLI); everything is stopped."""
    stop = threading.Event()
    with serving(opts, echo):
        while not stop.wait(1.0):
            pass
