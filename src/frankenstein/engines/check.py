"""``frank engine check``: start a recipe, send a few requests, print the server's timings, stop."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.contract import Reply

PROMPTS = [
    "def fibonacci(n):\n",
    "The server answered with",
    "import os\nimport sys\n\n",
    "class Parser:\n    def __init__(self",
]

HEADER = f"{'req':>3} {'prompt ms':>10} {'decode ms':>10} {'gen':>5} {'steps':>6} {'tok/step':>9} {'ms/step':>8} {'acc/draft':>10}"


def timing_row(i: int, reply: Reply) -> str:
    t = reply.timing
    tps = (t.generated_tokens - 1) / t.target_steps if t.generated_tokens and t.target_steps else float("nan")
    mps = t.decode_ms / t.target_steps if t.decode_ms is not None and t.target_steps else float("nan")
    acc = f"{t.accepted}/{t.drafted}" if t.drafted is not None else "-"
    return (
        f"{i:>3} {t.prompt_ms or 0:>10.2f} {t.decode_ms or 0:>10.2f} {t.generated_tokens or 0:>5} "
        f"{t.target_steps or 0:>6} {tps:>9.2f} {mps:>8.3f} {acc:>10}"
    )


def check_recipe(
    recipe: ResolvedRecipe,
    log_dir: Path,
    *,
    n_predict: int = 48,
    requests: int = 4,
    port: int | None = None,
    echo: Callable[[str], None] = print,
) -> list[Reply]:
    replies = []
    with start_engine(recipe, log_dir, port=port) as eng:
        echo(f"{eng.kind} {eng.version} ready at {eng.base_url} in {eng.ready_s:.2f} s ({recipe.name})")
        echo(HEADER)
        for i in range(requests):
            prompt = PROMPTS[i % len(PROMPTS)]
            if "/completion" in eng.endpoints:  # llama.cpp's native endpoint
                path, body = "/completion", {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False}
            else:
                path, body = "/v1/completions", {"model": recipe.model, "prompt": prompt, "max_tokens": n_predict}
            body.update({"temperature": 0.0, "seed": 1, "ignore_eos": True, "stream": False})
            reply = eng.request(path, json.dumps(body).encode())
            replies.append(reply)
            echo(timing_row(i, reply))
    echo("engine stopped")
    return replies
