"""An engine's own ``POST /tokenize``, in the dialect the engine speaks: found once, then kept.

Two dialects exist among the engines frank drives (read from their servers' sources; each adapter names its own,
``EngineTraits.tokenize``, and :func:`frankenstein.engines.tokenize_dialects` lists them):

- **llama.cpp** (``llama-server``): body ``{"content": TEXT, "add_special": BOOL}``, answer
  ``{"tokens": [...]}``. Given a body without ``content`` it answers 200 with no tokens.
- **OpenAI-style** (vLLM's ``serving_tokenization``, ``TokenizeCompletionRequest``; SGLang's
  ``serving_tokenize``, ``TokenizeRequest``): body ``{"prompt": TEXT, "add_special_tokens": BOOL}``
  (``model`` optional), answer ``{"tokens": [...], "count": N, "max_model_len": M}``. Given a body
  without ``prompt`` they answer 4xx.

:func:`find_tokenize` asks once, when ``frank serve`` starts: with the engine's dialect known (frank started
the engine from a recipe) only that dialect, else every adapter's in table order, the llama.cpp body first (a
vLLM or SGLang server refuses it) and then the OpenAI-style one. The answer is a :class:`TokenizeApi` that encodes
in that dialect with ``add_special_tokens`` honoured, or None when the engine has no ``/tokenize``
(404/405). An engine that answers neither dialect sensibly, and any later 4xx/5xx or malformed
answer, is one :class:`TokenizeApiError` naming the URL and the body sent.

    find_tokenize(url, dialect=None) -> TokenizeApi | None
    TokenizeApi.encode(text, add_special_tokens) -> list[int]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from frankenstein.engines import tokenize_dialects
from frankenstein.engines.http import TransportError, fetch_url
from frankenstein.engines.traits import LLAMACPP_TOKENIZE, OPENAI_TOKENIZE, TokenizeDialect
from frankenstein.errors import FrankError

PROBE_TEXT = "Hello world"
NOT_THERE = (404, 405)


class TokenizeApiError(FrankError):
    """The engine's ``/tokenize`` failed or answered something that is not a token list."""


LLAMACPP, OPENAI = LLAMACPP_TOKENIZE, OPENAI_TOKENIZE  # the two dialects (engines/traits.py)


def _shown(body: dict[str, Any], limit: int = 120) -> str:
    text = json.dumps(body, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def tokens_of(answer: Any) -> list[int]:
    """The token ids of a ``/tokenize`` answer of either dialect; ValueError says what is wrong."""
    if not isinstance(answer, dict) or "tokens" not in answer:
        raise ValueError("no 'tokens' field")
    tokens = answer["tokens"]
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ValueError("'tokens' is not a list of integers")
    count = answer.get("count")
    if count is not None and count != len(tokens):
        raise ValueError(f"'count' is {count!r} but 'tokens' holds {len(tokens)}")
    return tokens


@dataclass(frozen=True)
class Asked:
    """One request to ``/tokenize`` and what came back (``tokens`` None: not a token list, see ``why``)."""

    body: dict[str, Any]
    status: int
    tokens: list[int] | None
    why: str

    def describe(self) -> str:
        return f"sent {_shown(self.body)}, answered {self.status}" + (f" ({self.why})" if self.why else "")


def ask(url: str, body: dict[str, Any], timeout_s: float) -> Asked:
    """POST ``body`` to ``url``/tokenize; transport failures are a :class:`TokenizeApiError`."""
    try:
        answer = fetch_url(url + "/tokenize", "POST", json.dumps(body).encode(), timeout_s=timeout_s)
    except TransportError as exc:
        raise TokenizeApiError(f"engine at {url} did not answer /tokenize (sent {_shown(body)}): {exc}") from exc
    if answer.status_code != 200:
        return Asked(body, answer.status_code, None, answer.text[:200].strip())
    try:
        return Asked(body, 200, tokens_of(answer.json()), "")
    except ValueError as exc:  # json.JSONDecodeError is a ValueError too
        return Asked(body, 200, None, f"not a token list: {exc}; body {answer.text[:120]!r}")


class TokenizeApi:
    """``encode`` through one engine's ``/tokenize`` in the dialect :func:`find_tokenize` chose."""

    def __init__(self, url: str, dialect: TokenizeDialect, timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.dialect = dialect
        self.timeout_s = timeout_s

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        asked = ask(self.url, self.dialect.body(text, add_special_tokens), self.timeout_s)
        if asked.tokens is None:
            raise TokenizeApiError(f"engine at {self.url}: /tokenize ({self.dialect.name} dialect) {asked.describe()}")
        return asked.tokens

    def __repr__(self) -> str:
        return f"TokenizeApi({self.url!r}, {self.dialect.name})"


def find_tokenize(url: str, dialect: TokenizeDialect | None = None, timeout_s: float = 60.0) -> TokenizeApi | None:
    """The dialect ``url``/tokenize speaks (module docstring); None when the engine has no ``/tokenize``.
    ``dialect``: the one the engine is known to speak (its adapter's), else every known one is tried."""
    url = url.rstrip("/")
    tried: list[Asked] = []
    for tried_dialect in (dialect,) if dialect else tokenize_dialects():
        asked = ask(url, tried_dialect.body(PROBE_TEXT, False), timeout_s)
        if asked.status in NOT_THERE:
            return None
        if asked.tokens:
            return TokenizeApi(url, tried_dialect, timeout_s)
        if asked.tokens == []:  # a probe text always has tokens: the engine did not read this body
            asked = Asked(asked.body, asked.status, None, f"no tokens for {PROBE_TEXT!r}")
        tried.append(asked)
    said = "; ".join(a.describe() for a in tried)
    known = ", ".join(d.name for d in tokenize_dialects())
    raise TokenizeApiError(f"engine at {url}: /tokenize speaks no dialect frank knows ({known}): {said}")
