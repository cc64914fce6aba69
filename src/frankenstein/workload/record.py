"""The recording proxy: ``frank record --upstream URL --listen 127.0.0.1:PORT --out FILE``.

An OpenAI-compatible HTTP proxy that forwards every request to the upstream unchanged and appends
each finished generation turn (``/v1/chat/completions``, ``/v1/completions``, llama.cpp
``/completion``; streamed or not) to a trace: each turn is written (one whole line, in the kernel) before
the client sees the end of its response, and a writer thread ``fsync``s what was written in groups, off
the request path, within ``SYNC_DELAY_S`` (:class:`GroupCommit`): ``kill -9`` of the recorder loses no completed
turn, a power cut at most the last 50 ms of them. With
``--turn-after-answer`` (``after_answer``) the turn is written once the answer's end was sent: the answer
waits for nothing (a stream's end leaves at ``data: [DONE]``, before our decoder reads its events; a stream no
turn can be made of is still relayed whole, and said), and a ``kill -9`` loses at most the turns whose answers were in flight. One
recorder per trace: it holds the file's lock from its first turn until it stops. Between the answer's last
two bytes only the line is made (:func:`~frankenstein.workload.trace.recorded_line`, from the request side
prepared while the engine worked) and written; the fsync thread is woken after the last byte (when it sleeps).
Every other path (``/tokenize``, ``/detokenize``, ``/v1/models``, ``/health``, ``/metrics``,
token-count calls, ...) is passed through and not recorded; a plain request of either kind (``plainhead``) is sent
on as the bytes it came with, its plain answer taken by ``listener.open_plain``.

Reuse (``frank serve --record``)::

    from frankenstein.workload.record import serve_recorder
    srv = serve_recorder("http://127.0.0.1:8080", "127.0.0.1", 0, Path("turns.jsonl"))
    srv.url          # "http://127.0.0.1:PORT" (port 0 picks a free one)
    srv.shutdown()   # stop listening, close the upstream client, join the thread

A proxy with its own HTTP front can use the recording core without this server:
``TurnRecorder(out).record(endpoint, body, session_header, output, timings)`` appends one turn;
:func:`~frankenstein.engines.response.output_from_response` turns a JSON answer into a :class:`RecordedOutput`,
and :class:`~frankenstein.engines.response.StreamAssembler` does the same for an SSE stream fed chunk by chunk
(the one response decoder, shared with replay, the importers and the agent loop).

What is recorded, and when:
- the request body as the client sent it, minus credential-like fields outside what the model sees
  (``api_key``, ``token``, ``metadata.api_keys``, ``*_secret``, ...: :func:`redact_request`; never
  ``messages``/``prompt``/``tools`` and their schemas), the removed paths listed in the turn's
  ``redacted``; headers are never stored (``Authorization``, ``X-Api-Key``, cookies are forwarded to
  the upstream, not written);
- the session id from the ``X-Frank-Session`` header, else derived from the first user message
  (:func:`derive_session_id`); turn index = the session's next index in this file (resumed when
  appending to an existing trace);
- streams are relayed chunk by chunk as they arrive; only text, token-id and tool-call deltas are
  kept, never the raw chunks, so memory stays bounded by the output itself;
- client disconnects: the proxy stops writing to the client but reads the upstream to its end, and
  the turn is recorded complete with ``client_disconnected: true``;
- a stream's turn is written at its last event (``data: [DONE]``, llama.cpp's ``stop``), when its output
  is whole: in the gap the engine leaves before its final framing bytes (llama-server sends ``0\r\n``
  and ``\r\n`` in writes of their own), so it costs the answer's end nothing there;
- an upstream that fails (unreachable, non-200, dies mid-stream or ends a stream without a finish)
  records nothing: the trace holds only complete turns. The client gets the upstream's error, a
  502, or — mid-stream — an SSE ``error`` event and a connection closed without the final chunk,
  so its HTTP read fails. Each failure is counted in ``server.errors``. A stream that breaks after its
  last event keeps its turn (the output was whole); the client's read fails all the same.
- ``ttft_ms``/``e2e_ms`` are measured at the proxy (request sent upstream → first output delta /
  last byte; a stream's last event), the engine's own ``timings`` are stored beside them.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from json.scanner import make_scanner
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from frankenstein.engines.http import TransportError
from frankenstein.engines.response import StreamAssembler, canonical_endpoint, output_fields, server_timings
from frankenstein.errors import FrankError, TraceError
from frankenstein.workload.listener import (
    HOP_HEADERS,
    MAX_BODY_BYTES,
    NO_BODY,
    BadRequest,
    FieldLines,
    LeanHandler,
    PlainPooledAnswer,
    PooledAnswer,
    ProxyHTTPServer,
    UpstreamPool,
    bad_request,
    bodiless_length,
    loads,
    open_plain,
    read_body,
)
from frankenstein.workload.plainhead import plain_request, upstream_head
from frankenstein.workload.trace import (
    DecodedOutput,
    MeasuredTimings,
    PreparedRequest,
    RecordedOutput,
    RecordedTimings,
    fsync_dir,
    hold_for_appending,
    load_trace,
    make_turn_id,
    prepare_request,
    recorded_line,
    write_line,
)
from frankenstein.workload.wire import ChunkFraming, Headers

SESSION_HEADER = "X-Frank-Session"
_SESSION_FIELD = re.compile(rb"^x-frank-session: ([^\r\n]*)\r\n", re.I | re.M)  # in a plain request's fields
# How long the writer thread waits, once woken, for more turns before one fsync covers them all: the most a
# power cut can lose (plus one fsync's time); a kill -9 loses nothing written (each turn is in the kernel).
SYNC_DELAY_S = 0.05
# --turn-after-answer: how long a turn waits after its answer's end for the client to read it (the client's next bytes
# end the wait): the turn is in the kernel at most this later, a kill -9 meanwhile loses it (it is in flight).
TURN_WAIT_MS = 1
# ---------------------------------------------------------------- the recording core


class GroupCommit:
    """A trace held open for appending, and the thread that makes it durable.

    Opening takes the file's exclusive ``flock`` for as long as it stays open (a second recorder, or
    :func:`~frankenstein.workload.trace.append_turn`, is refused) and checks its last line once.
    :meth:`append` writes one whole line into the kernel before it returns (``O_APPEND``, one ``write``; a
    short write is removed again): a recorder killed with ``kill -9`` afterwards loses none of it. ``fsync``
    is the writer thread's, off the request path, in groups: the first :meth:`sync_soon` after a sync wakes
    it; it waits ``delay_s`` for more lines (their :meth:`sync_soon` wakes nobody) and syncs all lines written
    by then with one call. So a turn is on disk within ``delay_s`` plus one ``fsync`` of its answer, and a
    stream of answers wakes the thread once per ``delay_s``, not once per turn (each wake-up of another
    thread costs a context switch and a hand-over of the GIL). A failed ``fsync`` is raised by the next
    :meth:`append` (that turn is not recorded)."""

    def __init__(self, path: Path, delay_s: float = SYNC_DELAY_S) -> None:
        created = not path.exists()
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            self._size = hold_for_appending(self._fd, path)
        except TraceError:
            os.close(self._fd)
            raise
        if created:
            fsync_dir(path.parent)
        self._delay_s = delay_s
        self._dirty = threading.Event()  # set: lines written since the writer thread's last sync began
        self._closing = threading.Event()
        self.failed: str | None = None
        self.syncs = 0
        self._thread = threading.Thread(target=self._run, name="frank-record-fsync", daemon=True)
        self._thread.start()

    def append(self, data: bytes) -> None:
        if self.failed:
            raise OSError(f"fsync of {self.path} failed earlier: {self.failed}")
        self._size = write_line(self._fd, data, self._size, self.path)

    def sync_soon(self) -> None:
        """What was appended is fsynced within ``delay_s`` (called after the answer's end). Only the first call
        after a sync wakes the writer thread; the later ones find it woken (a flag read, no lock, no syscall):
        their lines were written before it clears the flag, so its ``fsync`` covers them."""
        if not self._dirty.is_set():
            self._dirty.set()

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            if self._closing.wait(self._delay_s):  # more turns come meanwhile; close() cuts the wait short
                return
            self._dirty.clear()
            self._sync()

    def _sync(self) -> None:
        try:
            os.fsync(self._fd)
            self.syncs += 1
        except OSError as exc:
            self.failed = exc.strerror or str(exc)

    def close(self) -> None:
        """Stop the thread, sync what is left, close the file (its lock with it)."""
        self._closing.set()
        self._dirty.set()
        self._thread.join(timeout=30)
        self._sync()
        os.close(self._fd)


class RecordedTurn(NamedTuple):
    """What ``on_turn`` is told of a turn just written to the trace (its id and output model made only when
    asked for: by frank record's printer thread, off the answer's path, which asks only for the id and the
    completion tokens)."""

    session_id: str
    turn_index: int
    endpoint: str
    decoded: RecordedOutput | DecodedOutput

    @property
    def turn_id(self) -> str:
        return make_turn_id(self.session_id, self.turn_index)

    @property
    def output(self) -> RecordedOutput:
        return self.decoded.model if isinstance(self.decoded, DecodedOutput) else self.decoded

    @property
    def completion_tokens(self) -> int | None:
        """The output's completion tokens, read from its line's JSON when it has one (no pydantic model built for
        frank record's console line: ~40 µs of CPU per turn, on the process's one GIL)."""
        if isinstance(self.decoded, DecodedOutput):
            return self.decoded.json.get("completion_tokens")
        return self.decoded.completion_tokens


class TurnRecorder:
    """Appends finished turns to ``out``, numbering them per session (thread-safe).

    Each turn is in the file (the kernel's) before :meth:`write` returns, so before the client sees the
    end of its response; a :class:`GroupCommit` thread ``fsync``s soon after :meth:`sync_soon` is called. The
    trace is taken at construction when it exists (another recorder on it is refused), else at the first
    turn. Appending to an existing trace resumes each session's turn index; an invalid existing trace is
    refused at construction (never appended to). :meth:`close` syncs, closes and lets the file go.
    ``sync_delay_s``: how long the writer thread gathers turns before one ``fsync`` (:class:`GroupCommit`)."""

    def __init__(self, out: str | Path, sync_delay_s: float = SYNC_DELAY_S) -> None:
        self.out = Path(out)
        self._delay_s = sync_delay_s
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._file: GroupCommit | None = None
        self._synced_before = 0  # fsyncs of files closed already
        self.recorded = 0
        if self.out.exists() and self.out.stat().st_size:
            self._file = GroupCommit(self.out, self._delay_s)
            try:
                self._resume()
            except FrankError:
                self.close()
                raise

    def _resume(self) -> None:
        for t in load_trace(self.out).turns:
            self._next[t.session_id] = max(self._next.get(t.session_id, 0), t.turn_index + 1)

    def record(
        self,
        endpoint: str,
        body: Mapping[str, Any],
        session: str | None,
        output: RecordedOutput,
        timings: RecordedTimings,
        *,
        client_disconnected: bool = False,
        prepared: PreparedRequest | None = None,
    ) -> RecordedTurn:
        """One turn appended and synced soon. ``prepared``: the request side of the turn, made while the
        engine worked (``prepare_request`` of the same endpoint, body and session); made here when not given."""
        p = prepared or prepare_request(endpoint, body, session)
        measured = MeasuredTimings(timings.server, timings.ttft_ms, timings.e2e_ms)
        turn = self.write(p, output, measured, client_disconnected)
        self.sync_soon()
        return turn

    def write(
        self,
        p: PreparedRequest,
        output: RecordedOutput | DecodedOutput,
        timings: MeasuredTimings,
        client_disconnected: bool,
    ) -> RecordedTurn:
        """The turn's line (:func:`~frankenstein.workload.trace.recorded_line`) in the file when this returns;
        not synced until :meth:`sync_soon`."""
        with self._lock:
            index = self._next.get(p.session_id, 0)
            line = recorded_line(p, index, output, timings, client_disconnected, round(time.time(), 3))
            if self._file is None:
                self._file = GroupCommit(self.out, self._delay_s)
            self._file.append(line)
            self._next[p.session_id] = index + 1
            self.recorded += 1
        return RecordedTurn(p.session_id, index, p.endpoint, output)

    def sync_soon(self) -> None:
        """Have the writer thread fsync what was written (off the answer's path: after its last byte)."""
        if self._file is not None:
            self._file.sync_soon()

    @property
    def syncs(self) -> int:
        """How many fsyncs made the turns durable (fewer than turns under load: group commit)."""
        return self._synced_before + (self._file.syncs if self._file else 0)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._synced_before += self._file.syncs
                self._file = None


# ---------------------------------------------------------------- the HTTP proxy


class _UpstreamFailed(Exception):
    pass


# What our decoder (engines/response.py) raises on an answer of a shape it does not expect: a string where an
# object belongs, a number where text does (pydantic's ValidationError is a ValueError). The answer still
# reaches the client whole; the turn is said, not recorded.
DECODER_ERRORS = (ValueError, TypeError, AttributeError, LookupError)


class _Handler(LeanHandler):
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the CLI reports turns
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def handle_one_request(self) -> None:
        """A plain request (``plainhead.plain_request``: GET or POST over HTTP/1.1, its head whole in the read buffer,
        no field the standard path must act on) read with one match, its fields forwarded as they came less the
        hop-by-hop ones; anything else, nothing read, as the standard library reads it."""
        self._plain: bytes | None = None  # a plain request's fields to forward
        req = plain_request(self.reader.peek(1), self.server.max_body_bytes)
        if req is None or (req[0] == b"GET" and req[3]):  # a GET's body is not read on the general path
            super().handle_one_request()
            return
        method, target, fields, length, head_len = req
        data = self.rfile.read(head_len + length)
        self.command, self.path, self.request_version = method.decode(), target.decode("latin-1"), "HTTP/1.1"
        self.close_connection, self._plain = False, fields
        if len(data) != head_len + length:
            bad_request(self, BadRequest(f"body ended after {len(data) - head_len} of {length} bytes"))
            return
        self._handle_body(data[head_len:])  # every answer leaves by sendall: nothing waits in wfile

    def _handle(self) -> None:
        try:
            raw = read_body(self, self.server.max_body_bytes)
        except BadRequest as exc:
            bad_request(self, exc)
            return
        self._handle_body(raw)

    def _handle_body(self, raw: bytes) -> None:
        self.client_gone = False
        endpoint = _endpoint_of(self.path) if self.command == "POST" else None
        try:
            if endpoint:
                self._exchange(endpoint, raw)
            else:
                self._pass_through(raw)
        except TransportError as exc:
            self.server.note_error(f"upstream {self.server.upstream}: {type(exc).__name__}: {exc}")
            if not self.client_gone:
                error = {"error": {"message": f"upstream failed: {exc}", "type": "upstream"}}
                self._reply(502, _JSON_HEAD, json.dumps(error).encode())  # no body to a HEAD request
        except OSError:  # the client went away while headers were being written
            self.close_connection = True

    def setup(self) -> None:
        super().setup()
        self._readable = select.poll()  # the client's side, asked by _peer_closed: one C call per turn
        self._readable.register(self.connection, select.POLLIN)

    def _peer_closed(self) -> bool:
        """The client closed its side (it sends nothing else while waiting for an answer)."""
        if self.client_gone:
            return True
        try:
            return bool(self._readable.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # -- forwarding helpers
    def _upstream_headers(self) -> str:
        """A general request's fields less the hop-by-hop ones, as head lines; the answer asked for uncompressed."""
        return self.headers.lines(HOP_HEADERS) + "Accept-Encoding: identity\r\n"

    def _session(self) -> str | None:
        """The client's ``X-Frank-Session`` (its first value)."""
        if self._plain is None:
            return self.headers.get(SESSION_HEADER)
        field = _SESSION_FIELD.search(self._plain)
        return field.group(1).decode("latin-1") if field else None

    def _reply(self, status: int, headers: FieldLines, data: bytes) -> None:
        """The engine's answer: its head (less the hop-by-hop fields) and ``data``, in one send; to a ``HEAD``, and for
        a 204 or 304, the head alone with the engine's length (``bodiless_length``)."""
        if self.command == "HEAD" or status in NO_BODY:
            self._send(self.answer_head(status, headers, bodiless_length(status, headers)))
            return
        self._send(self.answer_head(status, headers, b"Content-Length: %d\r\n" % len(data)) + data)

    def _pass_through(self, raw: bytes) -> None:
        """A request that is not recorded (``/tokenize``, ``/health``, ``/v1/models``, ...): sent on as a generation
        request is, its answer relayed whole."""
        resp = self._open(self.command, raw)
        try:
            self._reply(resp.status_code, resp.headers, resp.read())
        finally:
            resp.close()

    # -- recorded turns: each is appended before the client sees the end of its response
    def _exchange(self, endpoint: str, raw: bytes) -> None:
        """A generation request: forwarded as it came, then read and made ready as a turn while the engine works
        (once, even if the pool sends it again). A body too deeply nested for JSON is answered 400 (the engine's
        answer dropped); one that is not a JSON object is relayed and said, not recorded: never a silent gap."""
        t0 = time.perf_counter()
        self._body: dict[str, Any] | None = None
        self._prepared: PreparedRequest | Exception | None = None
        self._written = False
        parsed = False

        def prepare() -> None:  # while the engine works on the request: off the answer's path
            nonlocal parsed
            if not parsed:
                parsed = True
                self._body, self._prepared = self._read_turn(endpoint, raw)
                if self._body is None and not isinstance(self._prepared, BadRequest):
                    self.server.note_error(f"{endpoint}: body is not a UTF-8 JSON object; passed through, not recorded")

        try:
            resp = self._open("POST", raw, prepare)
        except TransportError:
            if not isinstance(self._prepared, BadRequest):
                raise
            bad_request(self, self._prepared)  # refused whatever the engine made of it
            return
        try:
            if isinstance(self._prepared, BadRequest):
                bad_request(self, self._prepared)
            elif self._body is None:
                self._reply(resp.status_code, resp.headers, resp.read())
            elif resp.status_code != 200:
                data = resp.read()
                self.server.note_error(f"upstream answered {resp.status_code} on {endpoint}")
                self._reply(resp.status_code, resp.headers, data)
            elif "text/event-stream" in resp.headers.get("content-type", ""):
                self._relay_stream(endpoint, resp, t0)
            else:
                self._relay_json(endpoint, resp, t0)
        except _UpstreamFailed as exc:
            self.server.note_error(str(exc))
        finally:
            resp.close()

    def _open(
        self, method: str, raw: bytes, prepare: Callable[[], None] | None = None
    ) -> PooledAnswer | PlainPooledAnswer:
        """The request sent on (``prepare`` run while the engine works); a plain request's head is made of its fields
        as they came, and a plain answer is taken as plainhead takes it (the bytes the general path gives)."""
        if self._plain is None:
            return self.server.open(method, self.path, raw, self._upstream_headers(), prepare)
        fields = self._plain + b"Accept-Encoding: identity\r\n"
        server = self.server
        head = upstream_head(method.encode(), self.path.encode("latin-1"), server.pool.host_field, fields, len(raw))
        return open_plain(server.pool, method, head, raw, server.upstream_slots, prepare)

    def _read_turn(self, endpoint: str, raw: bytes) -> tuple[dict[str, Any] | None, PreparedRequest | Exception | None]:
        """The body as a JSON object (None: it is not one) and its turn's request side, or why it cannot be: a
        :class:`BadRequest` (too deep), a ``ValueError`` (a number JSON cannot hold: said when it is recorded)."""
        try:
            body = _json_object(raw)
        except BadRequest as exc:
            return None, exc
        if body is None:
            return None, None
        try:
            return body, prepare_request(endpoint, body, self._session())
        except ValueError as exc:
            return body, exc

    def _record(
        self,
        endpoint: str,
        answer: dict[str, Any] | StreamAssembler,
        t0: float,
        ttft: float | None,
        gone: bool,
        end: float | None = None,
    ) -> None:
        """The turn written (between the answer's last two bytes: only what the line needs); ``gone``: the
        client closed its side; ``end``: when the answer's end was sent (after the answer; else now, the turn
        written before it). An answer our decoder refuses is said, not recorded."""
        try:
            if isinstance(answer, StreamAssembler):
                fields, server = answer.fields(), answer.timings
            else:
                fields, server = output_fields(endpoint, answer), server_timings(answer)
            output = DecodedOutput(fields)  # its line's JSON; a model only when on_turn's reader asks
        except DECODER_ERRORS as exc:
            self._unreadable(endpoint, exc)
            return
        timings = MeasuredTimings(server, ttft, round(((end or time.perf_counter()) - t0) * 1e3, 3))
        self._written = self.server.record(self._prepared, output, timings, gone)

    def _unreadable(self, endpoint: str, exc: Exception) -> None:
        """An answer our decoder cannot read, said once (the client gets it as the engine sent it)."""
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            why = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        else:
            why = f"{type(exc).__name__}: {exc}"
        self.server.note_error(f"turn not recorded: the engine's answer on {endpoint} is not one a trace holds ({why})")

    def _relay_json(self, endpoint: str, resp: PooledAnswer | PlainPooledAnswer, t0: float) -> None:
        """All of the answer but its last byte goes to the client at once (it reads the head meanwhile); the last
        byte only after the turn is in the trace: a client that has its answer can read the turn. After the
        answer (``--turn-after-answer``): the whole answer first, then the turn."""
        data = resp.read()
        after = self.server.after_answer
        held = b"" if after else data[-1:]
        head = self.answer_head(200, resp.headers, b"Content-Length: %d\r\n" % len(data))
        end = time.perf_counter()  # before the send: a client woken by it may read its clock before we read ours
        self._send(head + data[: len(data) - len(held)])
        gone = self._peer_closed()  # a client waiting for its answer sends nothing
        if after:
            self._let_the_client_read()
        answer = _answer_object(data)
        if answer is not None:
            self._record(endpoint, answer, t0, None, gone, end if after else None)
        if held:
            self._send(held)
        self._after_turn()
        if answer is None:
            raise _UpstreamFailed(f"upstream answered non-JSON on {endpoint}")

    def _relay_stream(self, endpoint: str, resp: PooledAnswer | PlainPooledAnswer, t0: float) -> None:
        """The head at once (the client reads it while the engine works), then each piece of the stream straight
        to the client's socket as it comes and into our decoder after; the final chunk once the turn is in the
        trace."""
        self._send(self.answer_head(200, resp.headers, b"Transfer-Encoding: chunked\r\n"))
        framing = resp.framing(hold_final=True, decode=resp.chunked)
        after = self.server.after_answer
        answered = False
        end, gone = 0.0, False  # when the answer's end was sent, and whether the client had left then

        def end_now(last: bytes = b"") -> None:  # [DONE]: only the engine's final chunk follows, the answer ends here
            nonlocal answered, end, gone
            if not answered:
                sent = time.perf_counter()  # before the send: the client, woken by it, may read its clock first
                self._send(last + b"0\r\n\r\n")
                answered = True
                if after:  # the turn is made later: its e2e and its client's leaving are taken now
                    end, gone = sent, self._peer_closed()

        def ended(r: _Relayed) -> None:  # the stream's last event: the turn is whole, written now
            if not after:
                self._record(endpoint, r.asm, t0, r.ttft, self._peer_closed())
            if framing.ended:
                end_now(r.last)  # [DONE], held until the turn was written, and the answer's end in one send
                if after:
                    self._let_the_client_read()
                    self._record(endpoint, r.asm, t0, r.ttft, gone, end)
                self._after_turn()

        sendall = None if self.client_gone else self.connection.sendall
        relayed = _Relayed(endpoint, self._send, framing, t0, ended, end_now if after else None, sendall)
        try:
            if resp.chunked:
                resp.pump_framed(relayed.framed, framing)
            else:
                for piece in resp.iter_raw():
                    relayed.piece(b"%x\r\n%s\r\n" % (len(piece), piece), piece)
        except TransportError as exc:
            if answered:  # the engine broke after its answer's end: the client and the trace have it whole
                self.close_connection = True
                return
            self._after_turn()  # a turn written at its last event stays: its output is whole
            self._fail_stream(f"upstream died mid-stream on {endpoint}: {exc!r}", framing, relayed.last)
        if answered:
            if framing.late:
                self.server.note_error(f"the engine sent {framing.late} bytes after [DONE] on {endpoint}: dropped")
            if not relayed.ended:  # --turn-after-answer: ended at [DONE] before its events were read
                self._not_recorded(endpoint, relayed)
            return
        relayed.read_held()
        asm = relayed.asm
        if relayed.unread is not None:  # relayed to its end as the engine sent it, not recorded
            self._unreadable(endpoint, relayed.unread)
        elif not asm.finished:
            why = f"upstream stream on {endpoint} ended without finishing" + (f": {asm.error}" if asm.error else "")
            self._fail_stream(why, framing, relayed.last)
        elif after:  # the end of the answer first, then its turn
            end_now()
            self._let_the_client_read()
            self._record(endpoint, asm, t0, relayed.ttft, gone, end)
            self._after_turn()
            return
        elif not relayed.ended:  # a stream that ends without a last event ([DONE], llama.cpp's stop)
            self._record(endpoint, asm, t0, relayed.ttft, self._peer_closed())
        self._send(relayed.last + b"0\r\n\r\n")  # the end of the answer ([DONE] held), once its turn is in the trace
        self._after_turn()

    def _not_recorded(self, endpoint: str, relayed: _Relayed) -> None:
        """A stream relayed to its end whose turn was not written: why, said."""
        if relayed.unread is not None:
            self._unreadable(endpoint, relayed.unread)
        else:
            why = relayed.asm.error or "it ended without finishing"
            self.server.note_error(f"turn not recorded: the stream on {endpoint} was relayed whole, but {why}")

    def _send(self, data: bytes) -> None:
        """``data`` straight to the client's socket (nothing of an answer goes through ``wfile``)."""
        if self.client_gone:
            return
        try:
            self.connection.sendall(data)
        except OSError:
            self.client_gone = True
            self.close_connection = True

    def _let_the_client_read(self) -> None:
        """``--turn-after-answer``: wait until the client sends again (its next request, or its close), at most
        :data:`TURN_WAIT_MS`, before making the turn: on 2 cores its ~0.1-0.3 ms of CPU, run at once, delayed the
        client reading the answer it had just been sent (docs/benchmarks.md, "Stop 40")."""
        self._readable.poll(TURN_WAIT_MS)

    def _after_turn(self) -> None:
        """Once the answer's last byte is out: the writer thread woken to fsync the turn."""
        if self._written:
            self.server.recorder.sync_soon()

    def _fail_stream(self, reason: str, framing: ChunkFraming, held: bytes = b"") -> None:
        """What was ``held`` (a [DONE] piece), then an error event as a last chunk (when what was relayed ends between
        chunks), no final chunk: the client's read fails."""
        event = (
            b"event: error\ndata: " + json.dumps({"error": {"message": reason, "type": "upstream"}}).encode() + b"\n\n"
        )
        if framing.between_chunks:
            self._send(held + b"%x\r\n%s\r\n" % (len(event), event))
        elif held:
            self._send(held)
        self.close_connection = True
        raise _UpstreamFailed(reason)


@lru_cache(maxsize=256)
def _endpoint_of(path: str) -> str | None:
    """:func:`~frankenstein.engines.response.canonical_endpoint`, remembered for the last 256 paths (a client
    sends the same one or two on every request: no ``urlsplit`` on the request's path)."""
    return canonical_endpoint(path)


class _Relayed:
    """A stream's pieces as they are relayed: each sent to the client first, then read by our decoder (off the
    client's path); the time to the first output (TTFT, from ``t0``) and what the decoder could not read.
    ``on_end`` is called once, at the stream's last event (``[DONE]``, llama.cpp's ``stop``) when the stream
    finished: the turn is whole then, and is written while the engine still sends its last framing bytes.
    ``end_first`` (``--turn-after-answer``) sends the piece with which the framing found the answer's end (``[DONE]``,
    alone or read with the engine's final chunk) and that end in one send: the client's answer ends before our
    decoder runs, and the client reads it in one wake-up.

    An OpenAI stream's pieces are held (with the time each came) and read together: at a piece that ends with
    ``data: [DONE]``, once ``HOLD_BYTES`` are held, and at the stream's end (:meth:`read_held`). Each piece then
    costs the proxy a list append between the engine's tokens, where reading it cost ~10-20 µs of code run
    cold: on 2 cores that CPU was taken from the engine's next token (an answer's ``[DONE]`` came ~0.15 ms
    later; docs/benchmarks.md, stop 38). The pieces are read warm, one after the other; memory stays bounded
    (``HOLD_BYTES`` of raw events and the output). llama.cpp's ``/completion`` stream, whose last event is a
    ``stop`` chunk, is read piece by piece."""

    __slots__ = (
        *("asm", "ttft", "unread", "ended", "_send", "_framing", "_t0", "_on_end", "_partial"),
        *("_held", "_held_bytes", "_hold", "_end_first", "_sendall", "last"),
    )

    def __init__(
        self,
        endpoint: str,
        send: Callable[[bytes], None],
        framing: ChunkFraming,
        t0: float,
        on_end: Callable[[_Relayed], None],
        end_first: Callable[[bytes], None] | None = None,
        sendall: Callable[[bytes], object] | None = None,
    ) -> None:
        self.asm = StreamAssembler(endpoint)
        self._end_first = end_first  # called when the framing ends the answer ([DONE]), before the events are read
        self.ttft: float | None = None
        self.unread: Exception | None = None
        self.ended = False
        self._partial = False  # the assembler's parser holds part of a line (pieces go to it until it does not)
        self._held: list[tuple[float, bytes]] = []  # pieces sent on, not yet read: (when each came, its data)
        self._held_bytes = 0
        self._hold = endpoint != "/completion"  # its last event is a stop chunk, found only by reading
        self._send, self._framing, self._t0, self._on_end = send, framing, t0, on_end
        self._sendall = sendall or send  # the client's socket's own (a C call), until it fails
        self.last = b""  # the piece that ended the answer ([DONE]), held unsent until the turn is written

    def framed(self, out: bytes) -> None:
        """A piece of a chunked answer as the engine framed it (its data decoded by the framing), in this one frame
        (it runs once per token, cold): held with the time it came, and sent by the client socket's ``sendall``
        (``send`` once that failed: the client left, and ``send`` says so and sends nothing more)."""
        data = self._framing.data
        self._held.append((time.perf_counter(), data))
        if self._framing.ended:  # [DONE]: an OpenAI client's answer is whole with it
            if self._end_first is not None:
                self._end_first(out)  # --turn-after-answer: [DONE] and the answer's end in one send, before our decoder
            else:
                self.last = out  # sent with the answer's end once the turn is in the trace
        else:
            try:
                self._sendall(out)
            except OSError:
                self._sendall = self._send
                self._send(out)
        self._held_bytes += len(data)
        if self._hold and self._held_bytes < HOLD_BYTES and not data.endswith(_DONE_EVENT):
            return
        self._read_now()

    def piece(self, out: bytes, data: bytes) -> None:
        """A piece of an answer ended by the engine's close (framed here as a chunk): sent, and read at once."""
        self._held.append((time.perf_counter(), data))
        self._send(out)
        self._read_now()

    def _read_now(self) -> None:
        self.read_held()
        if self.asm.done and not self.ended and self.unread is None and self.asm.finished:
            self.ended = True
            self._on_end(self)

    def read_held(self) -> None:
        """The pieces held, read by our decoder in the order they came: one by one until one carries output (TTFT:
        when it came), the rest as one piece (a stream read in pieces reads as the whole)."""
        held, first = self._held, 0
        while self.ttft is None and first < len(held):
            arrived, data = held[first]
            self._read(data)
            if self.asm.has_output:
                self.ttft = round((arrived - self._t0) * 1e3, 3)
            first += 1
        if first < len(held):
            self._read(b"".join([data for _, data in held[first:]]))
        held.clear()
        self._held_bytes = 0

    def _read(self, data: bytes) -> None:
        if self.unread is None:
            try:
                self._decode(data)
            except DECODER_ERRORS as exc:
                self.unread = exc

    def _decode(self, data: bytes) -> None:
        """``data`` into the assembler. A piece of whole ``data: {...}`` events (what engines send, one or two to a
        write), ``data: [DONE]`` last or alone, is read straight by json's scanner when the parser holds no
        partial line; any other through the assembler's SSE parser, which reads these the same (a test compares
        the two on random streams): one Python call per event where the parser makes ~8."""
        if not self._partial:
            done = data.endswith(_DONE_EVENT)
            objects = _sse_objects(data[: -len(_DONE_EVENT)] if done else data)
            if objects is not None:
                for obj in objects:
                    self.asm.event(obj)
                if done:
                    self.asm.done = True
                return
        self.asm.feed(data)
        self._partial = self.asm.buffered > 0


_DONE_EVENT = b"data: [DONE]\n\n"
HOLD_BYTES = 4096  # a stream's events held unread at most (~13 of llama-server's): read together, warm


def _sse_objects(data: bytes) -> list[dict[str, Any]] | None:
    """The JSON objects of a piece that is only whole ``data: {...}`` events (none: an empty piece), each on one
    line followed by a blank line, as the SSE parser reads them; None for any other piece (comments, other
    fields, CRLF line ends, an event cut by the piece's end, JSON with more after it)."""
    if not data:
        return []
    if not data.endswith(b"\n\n"):
        return None
    objects = []
    for line in data[:-2].split(b"\n\n"):
        if not line.startswith(b"data: {") or b"\n" in line:
            return None
        try:
            text = line.decode()
            value, end = _SCAN(text, 6)
        except (StopIteration, ValueError, RecursionError):
            return None
        if end != len(text):  # a value that begins with "{" is an object
            return None
        objects.append(value)
    return objects


_JSON_HEAD = Headers([("Content-Type", "application/json")])


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, None for anything else (passed through, not recorded); too deep
    nesting is a :class:`BadRequest`. The usual body (UTF-8, one value and nothing around it) goes through the
    decoder's scanner at once; any other is read as ``json.loads`` reads it (:func:`_plain_json_object`)."""
    try:
        text = raw.decode()
        value, end = _SCAN(text, 0)
        whole = end == len(text)
    except (StopIteration, ValueError, RecursionError):  # the scanner's "no JSON value here" is a StopIteration
        whole = False
    if not whole:
        return _plain_json_object(raw)
    return value if isinstance(value, dict) else None


_SCAN = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # the scanner json.loads runs, unwrapped


def _plain_json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _answer_object(data: bytes) -> dict[str, Any] | None:
    """An engine's JSON answer as an object, None when it is not one (too deep included)."""
    try:
        return _json_object(data)
    except BadRequest:
        return None


class _ProxyServer(ProxyHTTPServer):
    def __init__(
        self,
        addr: tuple[str, int],
        upstream: str,
        recorder: TurnRecorder,
        timeout_s: float,
        on_turn: Callable[[RecordedTurn], None] | None,
        after_answer: bool = False,
    ) -> None:
        super().__init__(addr, _Handler)
        self.upstream = upstream.rstrip("/")
        self.recorder = recorder
        self.on_turn = on_turn
        self.after_answer = after_answer  # each turn written after its answer's end (--turn-after-answer)
        self.timeout_s = timeout_s
        self.pool = UpstreamPool(self.upstream, timeout_s)
        self.errors: list[str] = []
        self._err_lock = threading.Lock()

    def open(
        self, method: str, path: str, raw: bytes, headers: str, meanwhile: Callable[[], None] | None = None
    ) -> PooledAnswer:
        """One upstream request on a kept-alive connection of the pool (a connection the engine closed
        meanwhile, and a failed connect, are retried: see :class:`UpstreamPool`); ``meanwhile`` runs once it
        is sent, before its answer is read."""
        return self.pool.open(method, path, raw or None, headers, self.upstream_slots, meanwhile)

    def note_error(self, message: str) -> None:
        with self._err_lock:
            self.errors.append(message)
        print(f"frank record: {message}", file=sys.stderr)

    def record(
        self,
        prepared: PreparedRequest | Exception | None,
        output: RecordedOutput | DecodedOutput,
        timings: MeasuredTimings,
        client_gone: bool,
    ) -> bool:
        """Write the turn into the trace and tell ``on_turn`` (frank record's only queues it; a test holds the
        answer's end there); False: it could not be written, said as an error."""
        try:
            if not isinstance(prepared, PreparedRequest):
                raise prepared or ValueError("its request was not read")
            turn = self.recorder.write(prepared, output, timings, client_gone)
        except (FrankError, OSError, ValueError) as exc:
            self.note_error(f"turn not recorded: {exc}")
            return False
        if self.on_turn:
            self.on_turn(turn)
        return True


class RecorderServer:
    """A running recording proxy (its own thread). ``url``, ``errors``, ``recorder``, ``shutdown()``."""

    def __init__(self, httpd: _ProxyServer) -> None:
        self._httpd = httpd
        host, port = httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="frank-record", daemon=True
        )
        self._thread.start()

    @property
    def errors(self) -> list[str]:
        return self._httpd.errors

    @property
    def recorder(self) -> TurnRecorder:
        return self._httpd.recorder

    @property
    def pool(self) -> UpstreamPool:
        return self._httpd.pool

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._httpd.pool.close()
        self._httpd.recorder.close()

    def __enter__(self) -> RecorderServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve_recorder(
    upstream: str,
    host: str = "127.0.0.1",
    port: int = 0,
    out: str | Path = "turns.jsonl",
    *,
    timeout_s: float = 600.0,
    on_turn: Callable[[RecordedTurn], None] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    after_answer: bool = False,
) -> RecorderServer:
    """Start the recording proxy in a background thread and return it (see the module docstring).

    ``upstream``: base URL of the OpenAI-compatible server; ``port=0``: a free port; ``on_turn``:
    called after each turn is appended; ``timeout_s``: upstream read timeout; a request body above
    ``max_body_bytes`` is answered 413. ``after_answer``: each turn is written after its answer's end, not
    before it: the answer is not held, but a ``kill -9`` can lose the turns whose answers were just sent
    (one per client in flight)."""
    if not upstream.startswith(("http://", "https://")):
        raise FrankError(f"--upstream {upstream!r}: expected an http:// or https:// URL")
    recorder = TurnRecorder(out)
    try:
        httpd = _ProxyServer((host, port), upstream, recorder, timeout_s, on_turn, after_answer)
    except OSError as exc:
        recorder.close()  # the trace is let go
        raise FrankError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    httpd.max_body_bytes = max_body_bytes
    return RecorderServer(httpd)
