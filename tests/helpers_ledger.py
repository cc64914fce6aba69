"""Builders for stored campaigns: designs registered through the real registry, starts written through
``Store.insert_start`` with fixed metrics, so the ledger and the note run on real store rows, no engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design.registry import Registered, register

from helpers_campaign import write_design

NO_GPU: dict[str, Any] = {"gpu": None, "note": "absent: no GPU or NVML on this machine"}


def gpu(peak_mib: float, power_w: float, index: int = 0) -> dict[str, Any]:
    """A start's resources as the NVML sampler records them (one GPU)."""
    return {
        "gpu": [
            {
                "index": index,
                "samples": 40,
                "memory_mib_peak": peak_mib,
                "memory_mib_mean": peak_mib - 100.0,
                "power_w_mean": power_w,
                "power_w_max": power_w + 25.0,
            }
        ],
        "memory_source": "per-process",
        "interval_s": 0.1,
        "sampled_at": 1.0,
    }


def stored_design(
    camp: Campaign,
    *,
    name: str,
    served: Sequence[float],
    candidate: Sequence[float],
    parts: str = '["draft"]',
    blocks: int | None = None,
    rule: str = "sign",
    extra: str = "",
    kind: str = "speed",
    resources: Callable[[str, int], dict[str, Any]] = lambda arm, b: NO_GPU,
    fail: Callable[[str, int], str | None] = lambda arm, b: None,
    day: int = 1,
    more: Callable[[str, int], dict[str, float]] = lambda arm, b: {},
) -> Registered:
    """Register a design and record one ok start per arm for each value given (block by block, in the
    registered arm order). Fewer values than blocks leaves the remaining blocks unrun. ``more(arm, block)``
    adds metrics to a start's (e.g. a veto's metric)."""
    path = write_design(
        camp.root / f"{name}.toml",
        name=name,
        kind=kind,
        blocks=blocks or len(served),
        rule=rule,
        candidate_parts=parts,
        extra=extra,
    )
    reg = register(camp, path)
    for b in range(len(served)):
        for pos, arm in enumerate(reg.schedule[b]):
            v = served[b] if arm == "served" else candidate[b]
            reason = fail(arm, b)
            camp.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="failed" if reason else "ok",
                reason=reason,
                started_at=f"2025-03-{day:02d}T10:{b:02d}:{pos * 30:02d}.000Z",
                metrics={}
                if reason
                else {
                    "verify_step_ms": v,
                    "tokens_per_step": 1.0 if arm == "served" else 1.5 + b / 100,
                    **more(arm, b),
                },
                engine="llamacpp",
                engine_version="b6000 (test build)",
                resources=resources(arm, b),
            )
    return reg


CONFIRMED = ([10.0, 10.2, 9.9, 10.1, 10.0, 10.3], [8.0, 8.3, 8.1, 8.2, 8.4, 8.2])  # 6 of 6 blocks better
MIXED = ([10.0, 10.2, 9.9, 10.1, 10.0, 10.3], [9.8, 10.4, 9.7, 10.3, 10.1, 10.2])  # 3 of 6 better


def golden(actual: str, path: Path, update: bool) -> None:
    """Compare with a golden file, or rewrite it when ``update`` (FRANK_UPDATE_GOLDEN=1)."""
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{path.name} differs; regenerate with FRANK_UPDATE_GOLDEN=1 if the change is intended"


def is_png(path: Path) -> bool:
    """A PNG signature, an IHDR chunk with a non-zero size, and an IEND at the end."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or not data.endswith(b"IEND\xaeB`\x82"):
        return False
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return width > 0 and height > 0
