"""``frank serve``: the served recipe behind the exact region-cache front."""

from __future__ import annotations

from pathlib import Path

import typer

from frankenstein.cli.app import app, check_listen


def _check_upstream(value: str | None) -> str | None:
    """``http://HOST:PORT`` or ``https://HOST:PORT``, the server's root; anything else is a usage error naming
    --upstream."""
    if value is None:
        return None
    from frankenstein.validation import http_root

    try:
        http_root(value, tls=True)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value.strip().rstrip("/")


@app.command()
def serve(
    campaign: Path | None = typer.Option(
        None,
        "--campaign",
        "-c",
        help="Campaign whose served recipe to start (default: the current folder). With --upstream: the campaign "
        "whose served step that engine serves, so its traffic is kept as observations of that step.",
    ),
    listen: str = typer.Option(
        "127.0.0.1:8088", "--listen", help="HOST:PORT of the front (127.0.0.1 by default).", callback=check_listen
    ),
    tokenizer: Path | None = typer.Option(
        None,
        "--tokenizer",
        help="The model's tokenizer.json (default: beside the model file, else rebuilt from a GGUF's metadata, "
        "else the engine's /tokenize counts with the cache off).",
    ),
    record: Path | None = typer.Option(None, "--record", help="Append every generation turn to this workload JSONL."),
    upstream: str | None = typer.Option(
        None,
        "--upstream",
        help="Front an engine already running at this URL (http://HOST:PORT, or https://HOST:PORT: its certificate "
        "checked against the system's CAs, or SSL_CERT_FILE) instead of starting the recipe.",
        callback=_check_upstream,
    ),
    cache_mb: int = typer.Option(256, "--cache-mb", min=1, help="Memory budget of the region cache, MiB."),
    max_body_mb: int = typer.Option(
        32, "--max-body-mb", min=1, help="Largest request body accepted, MiB; a larger one is answered 413."
    ),
    shadow: float = typer.Option(
        0.0, "--shadow", help="Fraction of counts also encoded in full and compared; a mismatch turns the cache off."
    ),
    over_scope: str = typer.Option(
        "queue",
        "--over-scope",
        help="Past the served recipe's adopted concurrency (adopt --scope concurrency=N): queue (wait for a "
        "free place) or refuse (answer 429).",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Serve the frozen recipe although frank.toml or a pinned file now disagrees with it, or the campaign "
        "fails verification (needs --why).",
    ),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the evidence chain."),
) -> None:
    """Start the served recipe behind an OpenAI-compatible front that counts tokens from an exact cache.

    /tokenize, /count and /v1/messages/count_tokens are answered from the region cache; everything
    else (streaming included) is passed to the engine. Stop with Ctrl-C; the engine is always reaped.
    The recipe served is the one the last adopt froze (what its design tested); frank.toml or a pinned file
    that now disagrees with it is refused, naming the difference (--force --why TEXT serves it anyway, recorded).
    Serving the campaign's recipe (or --upstream with --campaign), each request's route, status and time
    is kept, tagged with the ledger step served (frank report prints them as observations).

    Example: frank serve -c my-campaign --listen 127.0.0.1:8088 --record turns.jsonl
    """
    from frankenstein.errors import FrankError
    from frankenstein.regioncache.service import ServeOptions, serve_until_interrupted

    if force and not (why or "").strip():
        raise FrankError("--force needs --why TEXT: a forced serve is recorded with its reason")
    if not 0.0 <= shadow <= 1.0:
        raise FrankError(f"--shadow {shadow}: expected a fraction between 0 and 1")
    if over_scope not in ("queue", "refuse"):
        raise FrankError(f"--over-scope {over_scope}: expected queue or refuse")
    opts = ServeOptions(
        campaign=campaign,
        listen=listen,
        tokenizer=tokenizer,
        record=record,
        upstream=upstream,
        max_bytes=cache_mb * 1024 * 1024,
        shadow_rate=shadow,
        max_body_bytes=max_body_mb * 1024 * 1024,
        over_scope="queue" if over_scope == "queue" else "refuse",
        force=force,
        why=why,
    )
    serve_until_interrupted(
        opts, echo=lambda line: typer.echo(line, err=line.startswith(("frank serve: region", "warning: ")))
    )
