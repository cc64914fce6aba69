"""The trace format: a workload is a JSONL file of recorded turns, one complete turn per line.

Every line carries ``"frank_trace": 1`` (the format version, checked on load) and holds the exact
request body as the client sent it (credentials stripped), the recorded output and the recorded
timings. Replay never feeds history back from a live engine: each turn's request already contains
the recorded history, so every arm receives byte-identical requests (:func:`request_bytes`).

Writing: :func:`append_turn` appends one whole line with a single ``write`` under an exclusive lock
and ``fsync``s it, so a crash or a killed recorder never leaves half a line; a recorder holds the lock
(:func:`hold_for_appending`) and writes :func:`recorded_line`, the line of a :class:`Turn` made without
building one. Reading:
:func:`load_trace` accepts nothing else — a malformed line, a missing final newline (a half-written
line), an unknown version or a bad field is a :class:`TraceError` naming the file, the line number
and the field.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, NamedTuple

from pydantic import Field, ValidationError, field_validator

from frankenstein.errors import TraceError
from frankenstein.shipped import expand
from frankenstein.validation import UserFile

TRACE_VERSION: Final = 1
Endpoint = Literal["/v1/chat/completions", "/v1/completions", "/completion"]
ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/completion")
CHAT: Final = "/v1/chat/completions"


class _Strict(UserFile):
    """A trace line's fields (a file users write or edit)."""


class ToolCall(_Strict):
    """One tool call of an assistant reply (OpenAI shape, flattened)."""

    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: str = ""


class RecordedOutput(_Strict):
    """What the engine answered when the turn was recorded (choice 0 only)."""

    text: str = ""
    reasoning: str = ""
    token_ids: list[int] | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)


class RecordedTimings(_Strict):
    """``server``: the engine's own timings as it reported them (llama.cpp ``timings``, vLLM
    ``metrics``, SGLang ``meta_info`` numbers); ``ttft_ms``/``e2e_ms``: measured by the recorder."""

    server: dict[str, Any] = Field(default_factory=dict)
    ttft_ms: float | None = None
    e2e_ms: float | None = None


class Turn(_Strict):
    """One recorded request and its answer. ``request`` is stored as sent (key order kept)."""

    frank_trace: Literal[1] = TRACE_VERSION
    turn_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    turn_index: int = Field(ge=0)
    endpoint: Endpoint
    request: dict[str, Any]
    output: RecordedOutput = Field(default_factory=RecordedOutput)
    timings: RecordedTimings = Field(default_factory=RecordedTimings)
    client_disconnected: bool = False
    recorded_at: float | None = None
    source: str = "record"
    redacted: list[str] | None = None  # dotted paths of credential fields removed from the request

    @field_validator("request")
    @classmethod
    def _request_fits_endpoint(cls, request: dict[str, Any], info: Any) -> dict[str, Any]:
        endpoint = info.data.get("endpoint")
        if endpoint is not None:
            check_request(endpoint, request)
        return request


def check_request(endpoint: str, request: Mapping[str, Any]) -> None:
    """``ValueError`` unless ``request`` is one of ``endpoint``'s: a chat needs a non-empty ``messages`` list,
    the others a ``prompt``."""
    if endpoint == CHAT:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("a chat completions request needs a non-empty 'messages' list")
    elif "prompt" not in request:
        raise ValueError(f"a {endpoint} request needs a 'prompt'")


@dataclass(frozen=True)
class Workload:
    """Turns in file order plus the content hash a design pins."""

    turns: tuple[Turn, ...]
    hash: str
    path: Path | None = None

    @property
    def sessions(self) -> list[str]:
        """Session ids in order of first appearance."""
        return list(dict.fromkeys(t.session_id for t in self.turns))


# ---------------------------------------------------------------- bytes on the wire and the hash


def request_bytes(turn: Turn, overrides: Mapping[str, Any] | None = None) -> bytes:
    """The exact body bytes replay sends, identical for every arm.

    ``json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` encoded as
    UTF-8, with keys in the order recorded (no sorting). ``overrides`` (e.g. forced ``max_tokens``,
    ``seed``) replace top-level keys in place, or are appended after the recorded keys in the
    order given; the same overrides give the same bytes.
    """
    body = dict(turn.request)
    if overrides:
        body.update(overrides)
    return _dumps(body).encode("utf-8")


def _dumps(obj: Any, *, sort_keys: bool = False) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys)


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(sort_keys: bool) -> Callable[[Any], str]:
    """:func:`_dumps` without its per-call cost (the recorder's path): json's C encoder made once where there is
    one (``json.dumps`` makes one per call, with a cycle check no parsed JSON needs); it raises as ``_dumps``
    does (``ValueError`` for NaN, ``TypeError``), a cycle as a ``RecursionError``."""
    if c_make_encoder is None:
        return json.JSONEncoder(
            ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys, check_circular=False
        ).encode
    encode = c_make_encoder(None, _refuse, encode_basestring, None, ":", ",", sort_keys, False, False)
    return lambda obj: "".join(encode(obj, 0))


_compact = _encoder(sort_keys=False)
_canonical = _encoder(sort_keys=True)


def _turn_digest_line(turn: Turn) -> bytes:
    """What the hash covers for one turn: identity + request bytes + recorded output.

    The output and identity are canonical (sorted keys); the request is :func:`request_bytes`
    (recorded key order), because that order is what goes on the wire.
    """
    head = _dumps(
        {
            "turn_id": turn.turn_id,
            "session_id": turn.session_id,
            "turn_index": turn.turn_index,
            "endpoint": turn.endpoint,
            "output": turn.output.model_dump(mode="json"),
        },
        sort_keys=True,
    )
    return head.encode("utf-8") + b"\n" + request_bytes(turn) + b"\n"


def workload_hash(source: str | Path | Iterable[Turn]) -> str:
    """sha256 (hex) over, per turn in file order: canonical JSON (sorted keys, compact separators,
    UTF-8) of turn_id, session_id, turn_index, endpoint and the recorded output, then the turn's
    :func:`request_bytes`. Reformatting the file or changing timings/metadata (``timings``,
    ``recorded_at``, ``source``, ``client_disconnected``) keeps the hash; any change to a request
    byte sent, an output, or the order of turns changes it."""
    if isinstance(source, (str, Path)):
        return load_trace(source).hash
    h = hashlib.sha256()
    for turn in source:
        h.update(_turn_digest_line(turn))
    return h.hexdigest()


# ---------------------------------------------------------------- writing


def turn_line(turn: Turn, request_json: str | None = None) -> bytes:
    """One JSONL line (with its newline) for ``turn``; ``None`` fields left out. ``request_json``: the turn's
    request already serialized (:func:`prepare_request`, while the engine worked), spliced in as it is; the
    line is byte for byte the one made without it."""
    if request_json is None:
        return (_dumps(turn.model_dump(mode="json", exclude_none=True)) + "\n").encode("utf-8")
    fields = list(turn.model_dump(mode="json", exclude_none=True, exclude={"request"}).items())
    cut = [k for k, _ in fields].index("endpoint") + 1  # the request follows the endpoint in Turn's field order
    head = _dumps(dict(fields[:cut]))[:-1]
    tail = _dumps(dict(fields[cut:]))[1:]  # never empty: output, timings and source always follow
    return (head + ',"request":' + request_json + "," + tail + "\n").encode("utf-8")


class PreparedRequest(NamedTuple):
    """What of a turn is known once its request is read, made ready while the engine works on it: the
    redacted request, the paths redacted, the session, the request as the trace line holds it, and the
    line's bytes around the turn index (:func:`recorded_line` fills in the rest)."""

    request: dict[str, Any]
    redacted: list[str]
    session_id: str
    request_json: str
    endpoint: str
    line_head: bytes  # '{"frank_trace":1,"turn_id":"SESSION-'
    line_session: bytes  # '","session_id":"SESSION","turn_index":'
    line_request: bytes  # ',"endpoint":"...","request":{...},'


def prepare_request(endpoint: str, body: Mapping[str, Any], session: str | None) -> PreparedRequest:
    """Redact ``body``, find its session (``session`` if the client named one), check it is a request of
    ``endpoint`` and serialize it: every check :class:`Turn` makes of a request, done before the answer comes.
    ``ValueError`` for a request no turn can hold: another endpoint, no messages or prompt, a non-finite
    number, a lone surrogate (not UTF-8)."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint {endpoint!r} is not one of {', '.join(ENDPOINTS)}")
    request, redacted = redact_request(body)
    check_request(endpoint, request)
    session_id = session or derive_session_id(endpoint, request)
    try:
        request_json, session_json = _compact(request), _compact(session_id)
    except RecursionError as exc:  # a cycle (an API caller's dict): no JSON holds it
        raise ValueError("the request holds itself (a cycle); JSON cannot") from exc
    return PreparedRequest(
        request,
        redacted,
        session_id,
        request_json,
        endpoint,
        f'{{"frank_trace":{TRACE_VERSION},"turn_id":{session_json[:-1]}-'.encode(),
        f'","session_id":{session_json},"turn_index":'.encode(),
        f',"endpoint":{_compact(endpoint)},"request":{request_json},'.encode(),
    )


class MeasuredTimings(NamedTuple):
    """A recorded turn's :class:`RecordedTimings`, as the recorder measured them (no checks to make: the
    engine's numbers as :func:`~frankenstein.engines.response.server_timings` kept them, two times of ours)."""

    server: dict[str, Any]
    ttft_ms: float | None
    e2e_ms: float | None


class DecodedOutput:
    """An output as our decoder gave it (``RecordedOutput`` fields, tool calls as dicts), checked: its JSON for
    the trace line is made by hand when every value already has its field's exact type (pydantic would take it
    as it is), else through the model (which coerces or refuses: ``ValidationError``); the model itself is made
    only when asked for, off the answer's path (pydantic's code run cold costs ~40 us)."""

    __slots__ = ("json", "_fields", "_model")

    def __init__(self, fields: dict[str, Any]) -> None:
        exact = exact_output_json(fields)
        self._model: RecordedOutput | None = None
        self._fields = fields
        if exact is None:
            self._model = RecordedOutput(**fields)
            exact = _output_json(self._model)
        self.json: dict[str, Any] = exact

    @property
    def model(self) -> RecordedOutput:
        if self._model is None:
            self._model = RecordedOutput(**self._fields)
        return self._model


def exact_output_json(f: Mapping[str, Any]) -> dict[str, Any] | None:
    """``RecordedOutput(**f)``'s JSON (``model_dump(mode="json", exclude_none=True)``) when every value of ``f``
    already has its field's exact type, so the model would take each as it is; None otherwise."""
    ids, calls = f["token_ids"], f["tool_calls"]
    if not (type(f["text"]) is str and type(f["reasoning"]) is str and type(calls) is list):
        return None
    if ids is not None and not (type(ids) is list and all(type(i) is int for i in ids)):
        return None
    if not all(type(c) is dict and c.keys() == _CALL_KEYS and all(type(v) is str for v in c.values()) for c in calls):
        return None
    finish, prompt, completion = f["finish_reason"], f["prompt_tokens"], f["completion_tokens"]
    if finish is not None and type(finish) is not str:
        return None
    if not all(n is None or (type(n) is int and n >= 0) for n in (prompt, completion)):
        return None
    return _output_dict(f["text"], f["reasoning"], ids, calls, finish, prompt, completion)


_CALL_KEYS = {"id", "type", "name", "arguments"}


def recorded_line(
    p: PreparedRequest,
    index: int,
    output: RecordedOutput | DecodedOutput,
    timings: MeasuredTimings,
    client_disconnected: bool,
    recorded_at: float,
) -> bytes:
    """The trace line of turn ``index`` of ``p``'s session, byte for byte ``turn_line`` of the :class:`Turn` of
    the same values, made without building one (the recorder writes it between the answer's last two bytes).
    ``output`` is our decoder's, valid already; the request was checked by :func:`prepare_request`. A value
    JSON cannot hold (an engine's NaN timing) goes through the :class:`Turn`, which writes it as ``null``; so
    does one only pydantic writes (a set or bytes in timings an API caller gave ``TurnRecorder.record``)."""
    times: dict[str, Any] = {"server": timings.server}  # RecordedTimings's JSON: None left out
    if timings.ttft_ms is not None:
        times["ttft_ms"] = timings.ttft_ms
    if timings.e2e_ms is not None:
        times["e2e_ms"] = timings.e2e_ms
    tail = {
        "output": output.json if isinstance(output, DecodedOutput) else _output_json(output),
        "timings": times,
        "client_disconnected": client_disconnected,
        "recorded_at": recorded_at,
        "source": "record",
    }
    if p.redacted:
        tail["redacted"] = p.redacted
    try:
        text = _compact(tail)
    except (ValueError, TypeError):  # NaN, or (an API caller's timings) a value only pydantic writes as JSON
        return _line_of_turn(p, index, output, timings, client_disconnected, recorded_at)
    return b"%s%04d%s%d%s%s\n" % (p.line_head, index, p.line_session, index, p.line_request, text[1:].encode("utf-8"))


def _output_json(o: RecordedOutput) -> dict[str, Any]:
    """``o.model_dump(mode="json", exclude_none=True)``, by hand."""
    calls = [{"id": c.id, "type": c.type, "name": c.name, "arguments": c.arguments} for c in o.tool_calls]
    return _output_dict(o.text, o.reasoning, o.token_ids, calls, o.finish_reason, o.prompt_tokens, o.completion_tokens)


def _output_dict(
    text: str,
    reasoning: str,
    ids: list[int] | None,
    calls: list[dict[str, str]],
    finish: str | None,
    prompt: int | None,
    completion: int | None,
) -> dict[str, Any]:
    """A :class:`RecordedOutput`'s JSON in its field order, ``None`` left out (tool calls' keys in theirs)."""
    out: dict[str, Any] = {"text": text, "reasoning": reasoning}
    if ids is not None:
        out["token_ids"] = ids
    out["tool_calls"] = [
        {"id": c["id"], "type": c["type"], "name": c["name"], "arguments": c["arguments"]} for c in calls
    ]
    for key, value in (("finish_reason", finish), ("prompt_tokens", prompt), ("completion_tokens", completion)):
        if value is not None:
            out[key] = value
    return out


def _line_of_turn(
    p: PreparedRequest,
    index: int,
    output: RecordedOutput | DecodedOutput,
    timings: MeasuredTimings,
    client_disconnected: bool,
    recorded_at: float,
) -> bytes:
    """:func:`recorded_line` through a :class:`Turn` (the way for values only pydantic writes as JSON)."""
    turn = Turn(
        turn_id=make_turn_id(p.session_id, index),
        session_id=p.session_id,
        turn_index=index,
        endpoint=p.endpoint,  # type: ignore[arg-type]  # checked by prepare_request
        request=p.request,
        output=output.model if isinstance(output, DecodedOutput) else output,
        timings=RecordedTimings(server=timings.server, ttft_ms=timings.ttft_ms, e2e_ms=timings.e2e_ms),
        client_disconnected=client_disconnected,
        recorded_at=recorded_at,
        redacted=p.redacted or None,
    )
    return turn_line(turn, p.request_json)


def append_turn(path: str | Path, turn: Turn, wait_s: float = 5.0) -> None:
    """Append ``turn`` as one complete line: ``O_APPEND``, an exclusive ``flock``, one ``write`` of
    the whole line, ``fsync``. Refuses to append to a file whose last line is unfinished (that
    would glue two turns into one bad line), or locked for over ``wait_s`` (a running ``frank record``
    holds its trace); a short write is truncated away again."""
    data = turn_line(turn)
    created = not os.path.exists(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        append_line(fd, data, path, wait_s)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(Path(path).parent)


def append_line(fd: int, data: bytes, path: str | Path, wait_s: float = 5.0) -> None:
    """One whole line appended to the trace open as ``fd`` (``O_APPEND``) under an exclusive ``flock``, in a
    single ``write``: in the kernel when this returns (a killed process loses none of it), not yet ``fsync``ed.
    A lock held longer than ``wait_s`` (a running ``frank record`` holds its trace's) is a :class:`TraceError`."""
    deadline = time.monotonic() + wait_s
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            raise TraceError(f"locked by another writer (a frank record?) for {wait_s:g} s; not appended", path=path)
        time.sleep(0.001)
    try:
        write_line(fd, data, finished_size(fd, path), path)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def hold_for_appending(fd: int, path: str | Path) -> int:
    """Take the trace open as ``fd`` for as long as it stays open (its exclusive ``flock``; another writer is
    refused) and return its size, checked to end with a whole line."""
    if not _try_lock(fd):
        raise TraceError("another writer (a running frank record?) is appending to it", path=path)
    return finished_size(fd, path)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def finished_size(fd: int, path: str | Path) -> int:
    """The file's size; a :class:`TraceError` when its last line is unfinished (appending would glue two turns)."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        raise TraceError(f"last line (ends at byte {size}) is unfinished; refusing to append", path=path)
    return size


def write_line(fd: int, data: bytes, size: int, path: str | Path) -> int:
    """``data`` written in one ``write`` at the end of the file (``size`` bytes long, ``O_APPEND``); a short
    write is truncated away again and raised. The new size."""
    written = os.write(fd, data)
    if written != len(data):
        os.ftruncate(fd, size)
        raise TraceError(f"short write ({written} of {len(data)} bytes); the line was removed again", path=path)
    return size + written


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_private(path: str | Path) -> BinaryIO:
    """``path`` opened for writing (created or emptied) readable by its owner only (0600), as traces are:
    a recorded request can carry what redaction did not know to remove, and so can a file made from it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that was there keeps its mode through O_CREAT: set it
    return os.fdopen(fd, "wb")


def write_trace(path: str | Path, turns: Iterable[Turn]) -> str:
    """Write a whole trace (importers): to a temporary file, then rename, so a failure leaves no
    partial file. Returns the workload hash."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    h = hashlib.sha256()
    with open_private(tmp) as f:
        for turn in turns:
            f.write(turn_line(turn))
            h.update(_turn_digest_line(turn))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return h.hexdigest()


# ---------------------------------------------------------------- reading


def iter_turns(path: str | Path) -> Iterator[tuple[int, Turn]]:
    """(line number, turn) for every line; :class:`TraceError` on the first bad line.
    ``pkg:NAME`` is a workload shipped with frank (as designs name them)."""
    path = Path(expand(str(path)))
    try:
        f = open(path, "rb")
    except FileNotFoundError as exc:
        raise TraceError("file not found", path=path) from exc
    except IsADirectoryError as exc:
        raise TraceError("is a directory, not a trace file", path=path) from exc
    except OSError as exc:
        raise TraceError(f"cannot be read ({exc.strerror or exc})", path=path) from exc
    with f:
        lineno = 0
        for lineno, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                raise TraceError("no newline at the end: a half-written line", path=path, field=f"line {lineno}")
            yield lineno, parse_line(raw, path, lineno)


def parse_line(raw: bytes, path: str | Path, lineno: int) -> Turn:
    """Parse one JSONL line into a :class:`Turn`, with errors naming file, line and field."""
    where = f"line {lineno}"
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = "empty line" if not raw.strip() else f"not valid JSON ({exc})"
        raise TraceError(reason, path=path, field=where) from exc
    except RecursionError as exc:
        raise TraceError("JSON nested too deeply", path=path, field=where) from exc
    except ValueError as exc:  # NaN / Infinity: not JSON, and no engine takes them
        raise TraceError(str(exc), path=path, field=where) from exc
    if not isinstance(data, dict):
        raise TraceError(f"expected a JSON object, got {type(data).__name__}", path=path, field=where)
    try:  # a lone surrogate escape ("\\ud800") parses, but no request with it can be sent as UTF-8
        _dumps(data).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TraceError(
            "a string holds a lone surrogate escape (not encodable as UTF-8)", path=path, field=where
        ) from exc
    version = data.get("frank_trace")
    if version is None:
        raise TraceError("missing (not a frank trace line?)", path=path, field=f"{where}: frank_trace")
    if version != TRACE_VERSION:
        raise TraceError(
            f"unknown trace version {version!r} (this frank reads version {TRACE_VERSION})",
            path=path,
            field=f"{where}: frank_trace",
        )
    try:
        return Turn.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc, path, where) from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (NaN and Infinity are not allowed in a trace)")


def _field_error(exc: ValidationError, path: str | Path, where: str) -> TraceError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = {"extra_forbidden": "unknown field", "missing": "missing"}.get(err["type"], err["msg"])
    msg = re.sub(r"^Value error, ", "", msg)
    return TraceError(msg, path=path, field=f"{where}: {field}")


def load_trace(path: str | Path) -> Workload:
    """Read and validate a whole trace. Refuses duplicate turn ids and a repeated
    (session_id, turn_index) pair, naming the line."""
    seen_ids: dict[str, int] = {}
    seen_pos: dict[tuple[str, int], int] = {}
    turns: list[Turn] = []
    h = hashlib.sha256()
    for lineno, turn in iter_turns(path):
        _check_unique(turn, lineno, seen_ids, seen_pos, path)
        turns.append(turn)
        h.update(_turn_digest_line(turn))
    if not turns:
        raise TraceError("no turns", path=path)
    return Workload(turns=tuple(turns), hash=h.hexdigest(), path=Path(expand(str(path))))


def _check_unique(
    turn: Turn, lineno: int, ids: dict[str, int], pos: dict[tuple[str, int], int], path: str | Path
) -> None:
    where = f"line {lineno}"
    if turn.turn_id in ids:
        raise TraceError(
            f"duplicate turn id {turn.turn_id!r} (first on line {ids[turn.turn_id]})",
            path=path,
            field=f"{where}: turn_id",
        )
    key = (turn.session_id, turn.turn_index)
    if key in pos:
        raise TraceError(
            f"session {turn.session_id!r} already has turn index {turn.turn_index} (line {pos[key]})",
            path=path,
            field=f"{where}: turn_index",
        )
    ids[turn.turn_id] = lineno
    pos[key] = lineno


def workload_from_turns(turns: Sequence[Turn], path: Path | None = None) -> Workload:
    """A :class:`Workload` for turns held in memory (tests, importers)."""
    return Workload(turns=tuple(turns), hash=workload_hash(turns), path=path)


# ---------------------------------------------------------------- sessions and credentials

# What the model sees: never touched by redaction (a tool parameter named ``password`` is part of the prompt).
MODEL_VISIBLE = frozenset(
    {
        "messages",
        "prompt",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "response_format",
        "grammar",
        "json_schema",
        "input_ids",
        "input",
        "text",
        "system",
        "chat_template",
        "chat_template_kwargs",
        "stop",
        "logit_bias",
    }
)
# Credential detection (docs/workloads.md lists it): a field name is *normalised* first, camelCase split and
# case and separators folded (``accessToken``, ``Access-Token`` and ``access_token`` all read ``access_token``),
# then it is a credential when
#   - its last word is one of SECRET_LAST_WORDS (``auth_token``, ``client_secret``, ``x_api_key``, ``bearer``),
#   - any word is one of SECRET_ANY_WORDS (``password_hash``, ``authorization_header``, ``set_cookie``),
#   - it contains ``api_key`` or ``apikey`` (``api_key_v2``),
# unless it is one of NOT_SECRET (cache keys that only name a cache slot). A field holding request headers
# (HEADER_FIELDS: ``extra_headers``, ``headers``, ``default_headers``) is removed whole: headers are how
# credentials travel, and none is part of what the model sees. Plural words (``max_tokens``) are not credentials.
SECRET_LAST_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "apikey", "auth", "bearer", "jwt"})
SECRET_ANY_WORDS = frozenset(
    {"authorization", "password", "passwd", "passphrase", "secret", "credential", "credentials", "cookie", "cookies"}
)
HEADER_FIELDS = frozenset({"extra_headers", "headers", "default_headers"})
NOT_SECRET = frozenset({"prompt_cache_key", "cache_key", "idempotency_key"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def normalised_name(key: str) -> str:
    """``accessToken`` → ``access_token``, ``X-API-Key`` → ``x_api_key``: camelCase split, lower case, every
    run of other characters one ``_``."""
    return _SEPARATORS.sub("_", _CAMEL.sub("_", key).lower()).strip("_")


@lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """A credential-like field name, by its normalised form (see the list above this function); remembered
    for the last 4,096 names (a recorder sees the same few on every request)."""
    k = normalised_name(key)
    if k in NOT_SECRET:
        return False
    words = k.split("_")
    return (
        k in HEADER_FIELDS
        or words[-1] in SECRET_LAST_WORDS
        or not SECRET_ANY_WORDS.isdisjoint(words)
        or "api_key" in k
        or "apikey" in k
    )


def redact_request(body: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of a request without credential-like fields, and the dotted paths removed.

    Every field outside what the model sees (:data:`MODEL_VISIBLE`, left byte for byte as sent) is
    searched at any depth (top level, ``metadata``, ``extra_body``, ...); a credential-like key is
    removed whatever its value (a string, a list of keys, an object). Removed rather than masked, so a
    replayed request never carries a placeholder to the engine; the trace lists the paths instead."""
    paths: list[str] = []
    out = {
        k: (v if k in MODEL_VISIBLE else _redact(v, k, paths))
        for k, v in body.items()
        if k in MODEL_VISIBLE or not _drop(k, k, paths)
    }
    return out, paths


def _drop(key: Any, path: str, paths: list[str]) -> bool:
    if isinstance(key, str) and is_secret_key(key):
        paths.append(path)
        return True
    return False


def _redact(obj: Any, path: str, paths: list[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _redact(v, f"{path}.{k}", paths) for k, v in obj.items() if not _drop(k, f"{path}.{k}", paths)}
    if isinstance(obj, list):
        return [_redact(v, f"{path}[{i}]", paths) for i, v in enumerate(obj)]
    return obj


def strip_secrets(obj: Any) -> Any:
    """:func:`redact_request` without the paths (kept for importers and older callers)."""
    return redact_request(obj)[0] if isinstance(obj, dict) else obj


def derive_session_id(endpoint: str, body: Mapping[str, Any]) -> str:
    """A stable session id when the client gave none: ``s-`` + 12 hex digits of the sha256 of the
    first user message (chat), or of the first 1,024 characters of the prompt (completions,
    where sessions that share a long prefix merge: send ``X-Frank-Session`` to keep them apart)."""
    if endpoint == CHAT:
        first = next(
            (m.get("content") for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"),
            None,
        )
        key = _canonical(first)
    else:
        prompt = body.get("prompt")
        key = prompt[:1024] if isinstance(prompt, str) else _dumps(prompt)[:1024]
    return _session_of(key)


@lru_cache(maxsize=64)
def _session_of(key: str) -> str:
    """Remembered for the last 64 sessions: every turn of a session has the same key."""
    return "s-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def make_turn_id(session_id: str, turn_index: int) -> str:
    return f"{session_id}-{turn_index:04d}"
