"""Workload commands: ``frank record``, ``frank workload import``, ``frank workload stats``, ``frank workload export``."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from frankenstein.cli.app import app, check_listen
from frankenstein.errors import FrankError
from frankenstein.shipped import expand

if TYPE_CHECKING:
    from frankenstein.workload.sample import Cut
    from frankenstein.workload.record import RecordedTurn
    from frankenstein.workload.trace import Workload

workload_app = typer.Typer(help="Import and inspect workloads (recorded turns).", no_args_is_help=True)
app.add_typer(workload_app, name="workload")


@app.command()
def record(
    upstream: str = typer.Option(..., "--upstream", help="Base URL of the OpenAI-compatible server to record."),
    listen: str = typer.Option("127.0.0.1:8081", "--listen", help="HOST:PORT to listen on.", callback=check_listen),
    out: Path = typer.Option(..., "--out", help="Trace file (JSONL); turns are appended."),
    max_body_mb: int = typer.Option(
        32, "--max-body-mb", min=1, help="Largest request body accepted, MiB; a larger one is answered 413."
    ),
    turn_after_answer: bool = typer.Option(
        False,
        "--turn-after-answer",
        help="Write each turn after its answer's end (the answer waits for nothing; a kill -9 can lose the turns "
        "whose answers were just sent). Default: before the answer's last byte, so a client that has its answer "
        "can read its turn.",
    ),
) -> None:
    """Record turns through an OpenAI-compatible proxy until Ctrl-C.

    Example: frank record --upstream http://127.0.0.1:8080 --listen 127.0.0.1:8081 --out turns.jsonl
    """
    from frankenstein.validation import listen_address
    from frankenstein.workload.record import serve_recorder

    host, port = listen_address(listen)  # checked by check_listen

    lines: queue.SimpleQueue[RecordedTurn] = queue.SimpleQueue()
    stop = threading.Event()

    def on_turn(t: RecordedTurn) -> None:  # on the answer's path: only queued (said by print_turns), never printed
        lines.put(t)

    def print_turns() -> None:  # every 0.1 s, not once per turn: no thread woken on the answer's path
        while not stop.wait(0.1):
            _drain(lines)

    srv = serve_recorder(
        upstream,
        host,
        port,
        out,
        on_turn=on_turn,
        max_body_bytes=max_body_mb * 1024 * 1024,
        after_answer=turn_after_answer,
    )
    typer.echo(f"recording {srv.url} -> {upstream}, turns appended to {out} (Ctrl-C to stop)")
    printer = threading.Thread(target=print_turns, name="frank-record-lines", daemon=True)
    printer.start()
    try:
        threading.Event().wait()
    finally:
        srv.shutdown()
        stop.set()
        printer.join(timeout=1)
        _drain(lines)
        typer.echo(f"recorded {srv.recorder.recorded} turns to {out}; {len(srv.errors)} upstream errors")


def _drain(lines: queue.SimpleQueue[RecordedTurn]) -> None:
    """The turns recorded since the last drain, said in one write (the printer shares the proxy's GIL)."""
    said = []
    while not lines.empty():
        t = lines.get()
        said.append(f"recorded {t.turn_id} ({t.endpoint}, {t.completion_tokens} tokens)")
    if said:
        typer.echo("\n".join(said))


@workload_app.command("import")
def import_cmd(
    inputs: list[Path] = typer.Argument(
        ..., help="Input file(s); OpenAI Batch input + output files may be given together."
    ),
    source: str = typer.Option(..., "--from", help="openai | vllm | sharegpt"),
    out: Path = typer.Option(..., "--out", help="Trace file to write (refused if it exists, unless --force)."),
    output_len: int = typer.Option(
        None, "--output-len", help="vllm: tokens to generate per turn (else output_tokens)."
    ),
    endpoint: str = typer.Option(
        "chat", "--endpoint", help="vllm: chat (template applied, vLLM's default) | completions."
    ),
    model: str = typer.Option(None, "--model", help="vllm/sharegpt: a model name to put in every request."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Convert an OpenAI, vLLM bench custom-dataset or ShareGPT file into a frank trace.

    Example: frank workload import --from sharegpt conversations.json --out workloads/chat.jsonl
    """
    from frankenstein.workload.importers import import_trace
    from frankenstein.workload.trace import write_trace

    if source not in ("openai", "vllm", "sharegpt"):
        raise typer.BadParameter(f"{source!r}: expected openai, vllm or sharegpt", param_hint="--from")
    if out.exists() and not force:
        raise FrankError(f"{out}: exists; pass --force to overwrite")
    options: dict[str, object] = {}
    if source == "vllm":
        options = {"output_len": output_len, "endpoint": endpoint, "model": model}
    elif source == "sharegpt":
        options = {"model": model}
    result = import_trace(source, inputs, **options)  # type: ignore[arg-type]
    if not result.turns:
        raise FrankError(f"{', '.join(map(str, inputs))}: no turns to import")
    digest = write_trace(out, result.turns)
    for line in result.skipped:
        typer.echo(f"skipped: {line}", err=True)
    sessions = len({t.session_id for t in result.turns})
    typer.echo(f"imported {len(result.turns)} turns in {sessions} sessions to {out} (hash {digest})")


@workload_app.command("stats")
def stats_cmd(trace: str = typer.Argument(..., help="Trace file (JSONL), or pkg:demo-workload.jsonl.")) -> None:
    """Turns, sessions, token totals and the repeated-prefix share of a workload.

    Example: frank workload stats pkg:demo-workload.jsonl
    """
    from frankenstein.workload.sample import provenance_lines
    from frankenstein.workload.stats import compute_stats, format_stats
    from frankenstein.workload.trace import load_trace

    workload = load_trace(expand(trace))
    for line in format_stats(compute_stats(workload), trace):
        typer.echo(line)
    if workload.path is not None:
        for line in provenance_lines(workload.path, workload.hash):
            typer.echo(line)


@workload_app.command("export")
def export_cmd(
    trace: str = typer.Argument(..., help="Trace file (JSONL), or pkg:demo-workload.jsonl."),
    to: str = typer.Option(
        ...,
        "--to",
        help="aiperf (mooncake_trace, verbatim payloads) | vllm (custom dataset, one-prompt turns) | "
        "vllm-multiturn (benchmark_serving_multi_turn.py conversations: chats with history).",
    ),
    out: Path = typer.Option(..., "-o", "--out", help="File to write (refused if it exists, unless --force)."),
    as_recorded: bool = typer.Option(
        False, "--as-recorded", help="aiperf: the recorded bodies untouched (default: the bodies frank's replay sends)."
    ),
    design: Path | None = typer.Option(
        None, "--design", help="Take the replay settings (temperature, seed, stream, max_turns...) from this design."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Write a workload's turns in AIPerf's or vLLM bench's input format, to run the same turns in those tools.

    Example: frank workload export workloads/chat.jsonl --to aiperf -o chat.aiperf.jsonl
    """
    from frankenstein.design.model import load_design
    from frankenstein.workload.export import MULTITURN_CAVEAT, PEERS, export_workload, write_export
    from frankenstein.workload.trace import load_trace

    if to not in PEERS:
        raise typer.BadParameter(f"{to!r}: expected {', '.join(PEERS)}", param_hint="--to")
    if out.exists() and not force:
        raise FrankError(f"{out}: exists; pass --force to overwrite")
    settings = load_design(design).replay if design is not None else None
    result = export_workload(load_trace(expand(trace)), to, settings, as_recorded=as_recorded)  # type: ignore[arg-type]
    write_export(out, result)
    for line in result.skipped:
        typer.echo(f"skipped: {line}", err=True)
    if result.dropped_keys:
        typer.echo(f"not carried (vLLM's format has no place for them): {', '.join(result.dropped_keys)}", err=True)
    if to == "vllm" and result.skipped:
        typer.echo("chats with history: --to vllm-multiturn holds them as conversations", err=True)
    if to == "vllm-multiturn":
        typer.echo(f"note: {MULTITURN_CAVEAT}", err=True)
    typer.echo(
        f"exported {result.turns} turns ({result.endpoint}, {len(result.lines)} lines) to {out}; "
        f"{len(result.skipped)} skipped"
    )
    typer.echo(f"run: {result.hint.replace('FILE', str(out))}")


def _write_cut(trace: str, out: Path, force: bool, cut_of: Callable[[Workload], Cut]) -> None:
    from frankenstein.workload.sample import write_cut
    from frankenstein.workload.trace import load_trace

    if out.exists() and not force:
        raise FrankError(f"{out}: exists; pass --force to overwrite")
    parent = load_trace(expand(trace))
    cut = cut_of(parent)
    child = write_cut(parent, cut, out)
    for stratum, (drawn, of) in cut.strata.items():
        typer.echo(f"  {stratum}: {drawn} of {of}")
    sessions = len(child.sessions)
    typer.echo(
        f"wrote {len(child.turns)} of {len(parent.turns)} turns ({sessions} sessions) to {out} (hash {child.hash})"
    )
    typer.echo(f"provenance: {out}.provenance.json (parent hash {parent.hash[:16]}…)")


@workload_app.command("slice")
def slice_cmd(
    trace: str = typer.Argument(..., help="Trace file (JSONL), or pkg:demo-workload.jsonl."),
    out: Path = typer.Option(..., "-o", "--out", help="Trace file to write (refused if it exists, unless --force)."),
    session: list[str] = typer.Option(None, "--session", help="Keep this session (repeatable)."),
    turns: str = typer.Option(None, "--turns", help="Turn indices to keep, as A-B (inclusive), A- or -B."),
    min_tokens: int = typer.Option(None, "--min-tokens", help="Keep turns with at least this many prompt tokens."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Keep turns with at most this many prompt tokens."),
    endpoint: str = typer.Option(None, "--endpoint", help="Keep one endpoint: chat | completions | completion."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Keep the turns of a workload that pass every filter given, as a new pinned workload.

    Example: frank workload slice workloads/chat.jsonl --turns 0-3 --max-tokens 2000 -o workloads/short.jsonl
    """
    from frankenstein.workload.sample import SliceFilter, endpoint_of, slice_turns

    low, high = _index_range(turns)
    flt = SliceFilter(
        sessions=frozenset(session) if session else None,
        turn_min=low,
        turn_max=high,
        tokens_min=min_tokens,
        tokens_max=max_tokens,
        endpoint=endpoint_of(endpoint) if endpoint else None,
    )
    _write_cut(trace, out, force, lambda w: slice_turns(w, flt))


def _index_range(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    low, sep, high = text.partition("-")
    try:
        if not sep:
            return int(low), int(low)
        return (int(low) if low else None), (int(high) if high else None)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected A-B, A-, -B or A (turn indices)", param_hint="--turns") from None


@workload_app.command("sample")
def sample_cmd(
    trace: str = typer.Argument(..., help="Trace file (JSONL), or pkg:demo-workload.jsonl."),
    out: Path = typer.Option(..., "-o", "--out", help="Trace file to write (refused if it exists, unless --force)."),
    n: int = typer.Option(..., "--n", help="How many sessions (or turns, with --by turn) to draw."),
    seed: int = typer.Option(None, "--seed", help="The draw's seed (default: a fresh one, printed and recorded)."),
    by: str = typer.Option("session", "--by", help="session (whole sessions) | turn."),
    strata: str = typer.Option("none", "--strata", help="none | endpoint | length (prompt-token terciles)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Draw a stratified random sample of a workload's sessions or turns, reproducible from its seed.

    Example: frank workload sample workloads/chat.jsonl --n 8 --strata length --seed 7 -o workloads/s8.jsonl
    """
    import secrets

    from frankenstein.workload.sample import sample_turns

    if by not in ("session", "turn"):
        raise typer.BadParameter(f"{by!r}: expected session or turn", param_hint="--by")
    if strata not in ("none", "endpoint", "length"):
        raise typer.BadParameter(f"{strata!r}: expected none, endpoint or length", param_hint="--strata")
    drawn = seed if seed is not None else secrets.randbelow(2**31)
    typer.echo(f"seed {drawn}")
    _write_cut(trace, out, force, lambda w: sample_turns(w, n, drawn, by, strata))  # type: ignore[arg-type]
