"""``frank fidelity check``: a quick, unregistered forced-decode KL check of a part against a recipe."""

from __future__ import annotations

from pathlib import Path

import typer

from frankenstein.cli.app import app

fidelity_app = typer.Typer(
    help="Fidelity: forced-decode top-k KL of a part against the served recipe.\n\n"
    "Example: frank fidelity check base --part q8 -w workloads/w.jsonl -c camp",
    no_args_is_help=True,
)
app.add_typer(fidelity_app, name="fidelity")


@fidelity_app.command("check")
def check(
    recipe: str = typer.Argument(..., help="Recipe name from frank.toml, or 'served'."),
    part: str = typer.Option(..., "--part", "-p", help="The part to add for the candidate."),
    workload: Path = typer.Option(..., "--workload", "-w", help="Workload (JSONL trace; pkg:NAME for shipped ones)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    top_k: int = typer.Option(64, "--top-k", min=1, help="Top-k logprobs per position (the engine may cap it)."),
    max_positions: int | None = typer.Option(None, "--max-positions", min=1, help="Stop after this many positions."),
    threshold: float = typer.Option(0.5, "--threshold", help="KL (nats) above which a position is counted."),
    tolerance: float | None = typer.Option(
        None, "--tolerance", help="Also say what the rule would say with this mean-KL tolerance."
    ),
) -> None:
    """Served (A), served + part (B), served again (A′): KL(A ‖ B) per position beside the noise floor KL(A ‖ A′).

    Unregistered: it prints numbers, never a verdict. A workload without recorded outputs gets
    continuations generated once by the served recipe at temperature 0.

    Example: frank fidelity check base --part q8 --workload workloads/w.jsonl -c camp --top-k 64
    """
    from frankenstein.design.quickcheck import check_fidelity

    check_fidelity(
        campaign,
        recipe,
        part,
        workload,
        top_k=top_k,
        max_positions=max_positions,
        threshold=threshold,
        tolerance=tolerance,
        echo=typer.echo,
    )


@fidelity_app.command("fill")
def fill(
    recipe: str = typer.Argument(..., help="Recipe name from frank.toml, or 'served'."),
    workload: Path = typer.Option(..., "--workload", "-w", help="Workload whose turns lack recorded outputs."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the filled copy (a new file)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    tokens: int = typer.Option(16, "--tokens", min=1, help="Continuation length where the turn records none."),
) -> None:
    """Store greedy continuations (token ids and text, temperature 0) of RECIPE as the workload's recorded outputs.

    A fidelity design forces the recorded continuation on every start; a workload recorded without
    output needs one, generated once and pinned by the new file's hash.

    Example: frank fidelity fill served -w workloads/w.jsonl -o workloads/w-filled.jsonl -c camp
    """
    from frankenstein.design.quickcheck import fill_outputs

    fill_outputs(campaign, recipe, workload, out, tokens=tokens, echo=typer.echo)
