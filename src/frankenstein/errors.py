"""One exception tree for Frankenstein.

    FrankError                      anything the CLI turns into a one-line message (exit 1)
    ├── ConfigError                 a file the user wrote is wrong (names the file and the field)
    │   ├── DesignError             a design file, or a design refused at registration
    │   ├── UnknownNameError        a recipe or part name frank.toml lacks (the caller names its file + field)
    │   ├── TraceError              a workload / trace file
    │   └── TaskError               an agent task folder
    ├── StoreError                  the SQLite store: format version, migrations, locking
    │   ├── RegistryError           the hash-chained registry does not verify (tamper)
    │   └── RunLockedError          another runner holds the campaign
    ├── EngineError                 an engine could not be found, started, talked to, or died
    │   ├── BinaryNotFoundError
    │   ├── EngineStartError        died or timed out during start (carries the log tail)
    │   ├── EngineRequestError      a request failed (carries the turn id where known)
    │   └── EngineFailure           an agent's request failed; ``status`` says how the episode ends
    ├── AnalysisError               data cannot be analysed under the registered rule (bad CSV too)
    ├── FidelityError
    ├── SandboxError
    ├── ClusterError                a Ray cluster cannot run a design (Ray missing, no host, lost driver link)
    └── LedgerError                 adopt/revert refused

Foreign exceptions are translated at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class FrankError(Exception):
    """Base of every error Frankenstein raises on purpose."""


class ConfigError(FrankError):
    """A user-written file is invalid; the message names the file and the field."""

    def __init__(self, message: str, *, path: object | None = None, field: str | None = None) -> None:
        where = ": ".join(str(x) for x in (path, field) if x)
        where = where + ": " if where else ""
        super().__init__(one_line(where + message))
        self.path = path
        self.field = field


class DesignError(ConfigError):
    """A design file is invalid, or a design was refused at registration."""


class UnknownNameError(ConfigError):
    """A recipe or part name that ``frank.toml`` lacks. ``what`` is ``recipe`` or ``part``; ``index`` is the
    position of the part among the extra parts asked for, so the caller can name its own file and field."""

    def __init__(
        self,
        message: str,
        *,
        what: str,
        name: str,
        index: int | None = None,
        path: object | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message, path=path, field=field)
        self.message, self.what, self.name, self.index = message, what, name, index


class TraceError(ConfigError):
    """A trace (workload) file is invalid."""


class TaskError(ConfigError):
    """An agent task folder is invalid."""


class StoreError(FrankError):
    """The campaign store cannot be opened or written."""


class RegistryError(StoreError):
    """The registry chain or a stored design does not match its hash."""


class RunLockedError(StoreError):
    """Another runner is working on this campaign."""


class EngineError(FrankError):
    """An engine could not be found, started, talked to, or it died."""


class BinaryNotFoundError(EngineError):
    """The engine's binary could not be found."""


class EngineStartError(EngineError):
    """The engine died or timed out while starting; the message carries its log tail."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        text = message
        if log_tail:
            text += "\n--- engine log (tail) ---\n" + log_tail.rstrip()
        super().__init__(text)
        self.log_tail = log_tail


class EngineRequestError(EngineError):
    """A request to a running engine failed."""

    def __init__(self, message: str, *, turn_id: str | None = None, status: int | None = None) -> None:
        prefix = f"turn {turn_id}: " if turn_id else ""
        super().__init__(prefix + message)
        self.turn_id = turn_id
        self.status = status


class EngineFailure(EngineError):
    """An agent's request to the engine failed; ``status`` says how the episode ends
    (``engine_error``, ``context_limit``, ``time_limit``)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class AnalysisError(FrankError):
    """The data cannot be analysed under the rule asked for."""


class FidelityError(FrankError):
    """A fidelity measurement could not be made."""


class SandboxError(FrankError):
    """The agent sandbox could not run a command."""


class ClusterError(FrankError):
    """A design cannot run on the Ray cluster asked for (Ray is not installed, no host offers the
    ``frank_host`` resource, the cluster cannot be reached)."""


class LedgerError(FrankError):
    """An adopt or revert was refused."""


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped (``\\n``), so a message
    built from user input (a field named with a newline) stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def two_digests(a: str, b: str, least: int = 12) -> tuple[str, str]:
    """Prefixes of two digests for a message about their mismatch, long enough to differ: ``least`` hex digits,
    or four past the first that differs (a digest given as a prefix of the other is shown whole)."""
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    n = max(least, same + 4)
    return tuple(d[:n] + ("…" if len(d) > n else "") for d in (a, b))  # type: ignore[return-value]
