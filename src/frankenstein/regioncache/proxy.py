"""The ``frank serve`` front: an OpenAI-compatible HTTP server on 127.0.0.1 that answers token
counting from the region cache and passes everything else to the engine behind it.

Answered here (JSON in, JSON out):
- ``POST /tokenize`` (llama.cpp shape): ``{"content": str, "add_special": bool=false}`` →
  ``{"tokens": [...]}``; a request asking for ``with_pieces`` goes to the engine;
- ``POST /count``: ``{"content": str, "add_special": bool=false}`` → ``{"count": N}``;
- ``POST /v1/messages/count_tokens`` (Anthropic shape) → ``{"input_tokens": N}``, the body rendered
  by ``render.Renderer`` and counted without added specials (the template writes its own BOS); a
  body that cannot be rendered as text (images) goes to the engine;
- ``GET /frank/status``: the cache's status (enabled, why, sizes, shadow checks).

With an ``observe`` log (:class:`~frankenstein.regioncache.observe.ServedLog`, what ``frank serve``
keeps for the campaign) every answered request adds its route, status, milliseconds from the parsed
request line to the last byte sent, and whether the engine failed it (a 5xx or no answer).

Everything else — generation, streaming included, ``/health``, ``/metrics``, ... — is relayed to the
upstream engine over kept-alive connections; an answer with a length is relayed with it (head and body in
one send), a chunked one as the bytes the engine sent (each read sent on at once, its framing followed by
``wire.ChunkFraming`` to find the end), one ended by a close chunk by chunk: SSE events reach the client
when the engine sends them. The server is the stdlib ``ThreadingHTTPServer`` (one thread per connection, a deep backlog:
see :mod:`frankenstein.workload.listener` for the concurrency it is built for); heads are read and
written, and the engine is asked, by the lean HTTP/1.1 of :mod:`frankenstein.workload.wire`.
Malformed ``Content-Length`` and too deeply nested JSON get a 400; a malformed head 400, a huge one 431.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from frankenstein.engines.http import TransportError
from frankenstein.errors import FrankError
from frankenstein.regioncache.admission import Admission
from frankenstein.regioncache.cache import CacheStatus
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.render import Renderer, Unrenderable
from frankenstein.workload.listener import (
    HOP_HEADERS,
    MAX_BODY_BYTES,
    NO_BODY,
    READ_BUFFER,
    BadRequest,
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
    send_json,
)
from frankenstein.workload.plainhead import plain_request, upstream_head

LOCAL_ROUTES = frozenset({"/tokenize", "/count", "/v1/messages/count_tokens"})  # counts answered by the front


class Counter(Protocol):
    """What the front counts with: the region cache, or the engine's own /tokenize (``engine_count``)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def count(self, text: str, add_special_tokens: bool = True) -> int: ...

    def status(self) -> CacheStatus: ...


class FrontServer(ProxyHTTPServer):
    def __init__(
        self,
        addr: tuple[str, int],
        upstream: str,
        cache: Counter,
        renderer: Renderer,
        timeout_s: float,
        observe: ServedLog | None = None,
        admission: Admission | None = None,
        context_scope: int | None = None,
    ) -> None:
        super().__init__(addr, _Handler)
        self.admission = admission  # the served recipe's adopted concurrency, held for passed-through POSTs
        self.context_scope = context_scope  # its adopted context (tokens): a longer prompt is observed as outside
        self.upstream = upstream.rstrip("/")
        self.cache = cache
        self.renderer = renderer
        self.observe = observe
        # Kept-alive upstream connections, as the recording proxy has: a connection llama-server closed
        # just as it is reused, and a failed connect (nothing sent yet), are retried (UpstreamPool).
        self.timeout_s = timeout_s
        self.pool = UpstreamPool(self.upstream, timeout_s)
        self.local_answers = 0
        self.passed_through = 0
        self._lock = threading.Lock()

    def tally(self, local: bool) -> None:
        with self._lock:
            if local:
                self.local_answers += 1
            else:
                self.passed_through += 1


class _Handler(LeanHandler):
    server: FrontServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet; the CLI prints a summary
        pass

    # ------------------------------------------------------------------ observations
    def parse_request(self) -> bool:
        self._t0 = time.perf_counter()  # the request line is read: the request's time starts here
        self._engine_error = False
        return super().parse_request()

    def handle_one_request(self) -> None:
        self.status_sent = None  # set by send_response or answer_head: the answer's status, observed after it
        self._to_count: bytes | None = None  # a passed-on POST's body, counted against the context scope
        if not self._passed_plain():
            super().handle_one_request()
        observe = self.server.observe
        if observe is not None and self.status_sent is not None:
            ms = (time.perf_counter() - self._t0) * 1000.0
            counted = self._to_count  # counted after the answer was sent: off the request's path
            outside = self._outside_context(counted) if counted else None
            observe.add(self.path, self.status_sent, ms, self._engine_error, outside)

    # ------------------------------------------------------------------ the plain path
    def _passed_plain(self) -> bool:
        """A plain request (``plainhead.plain_request``: GET or POST over HTTP/1.1, its head whole in the read buffer,
        no field this handler must act on) answered with the fewest steps: a count here, anything else passed to the
        engine (within the adopted concurrency, queued); False, nothing read, for anything else and for a request
        over scope to refuse (the general path then takes it). The engine gets the bytes the general path would
        send, and the client the same answer."""
        server = self.server
        req = plain_request(self.reader.peek(1), server.max_body_bytes)
        if req is None:
            return False
        self._t0 = time.perf_counter()
        method, target, fields, length, head_len = req
        path = target.decode("latin-1")
        self._route = here = route(path)
        if method == b"GET" and (length or here == "/frank/status"):  # a GET's body is not read; the status is
            return False  # the general path's
        local = method == b"POST" and here in LOCAL_ROUTES
        admission = server.admission if method == b"POST" and not local else None
        if admission is not None and admission.mode != "queue":  # a refusal is the general path's
            return False
        self.command, self.path, self.request_version = method.decode(), path, "HTTP/1.1"
        self.close_connection, self._engine_error = False, False
        if admission is not None:
            admission.enter()  # queue mode: waits for a place, taken once the request line is read
        try:
            data = self.rfile.read(head_len + length)
            if len(data) != head_len + length:
                bad_request(self, BadRequest(f"body ended after {len(data) - head_len} of {length} bytes"))
            elif not (local and self._answered_here(data[head_len:])):
                self._send_plain(method, target, fields, data[head_len:])
        finally:
            if admission is not None:
                admission.leave()
        return True

    def _send_plain(self, method: bytes, target: bytes, fields: bytes, body: bytes) -> None:
        """To the engine with the head plainhead makes; its answer relayed as any other (a plain one taken from the
        read buffer as :class:`PlainPooledAnswer`, nothing parsed into ``Headers``)."""
        server = self.server
        head = upstream_head(method, target, server.pool.host_field, fields, len(body))
        if method == b"POST" and server.context_scope is not None:
            self._to_count = body
        try:
            resp = open_plain(server.pool, self.command, head, body, server.upstream_slots)
        except TransportError as exc:
            self._upstream_failed(exc)
            return
        try:
            self._relay(resp)
        finally:
            resp.close()
            server.tally(local=False)

    def _upstream_failed(self, exc: BaseException) -> None:
        self._engine_error = True
        self._json(502, {"error": {"message": f"upstream {self.server.upstream}: {exc}", "type": "bad_gateway"}})
        self.server.tally(local=False)

    # ------------------------------------------------------------------ routing
    def do_POST(self) -> None:
        """Counts are answered here; any other POST goes to the engine within the served recipe's adopted
        concurrency: its place is taken when its request line is read (queued or refused past the limit)."""
        admission = self.server.admission
        self._route = route(self.path)
        if admission is None or self._route in LOCAL_ROUTES:
            self._post()
            return
        if not admission.enter():
            self._refuse_over_scope(admission)
            return
        try:
            self._post()
        finally:
            admission.leave()

    def _refuse_over_scope(self, admission: Admission) -> None:
        """429 naming the scope; the body is read first, so the client gets the answer, not a reset."""
        try:
            self._read_body()
        except BadRequest as exc:
            bad_request(self, exc)
            return
        self._json(429, admission.refusal())

    def _post(self) -> None:
        try:
            raw = self._read_body()
        except BadRequest as exc:
            bad_request(self, exc)
            return
        if not self._answered_here(raw):
            self._pass_through(raw)

    def _answered_here(self, raw: bytes) -> bool:
        """A count answered by the front (200; 400 or 502 when it cannot be counted); False: not a count this front
        answers (another route, or a shape for the engine), to pass on."""
        local = _LOCAL.get(self._route)
        if local is None:
            return False
        try:
            answer = local(self, _json_object(raw))
        except BadRequest as exc:
            self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return True
        except FrankError as exc:  # counting through the engine's /tokenize, and the engine failed
            self._engine_error = True
            self._json(502, {"error": {"message": str(exc), "type": "bad_gateway"}})
            return True
        if answer is None:
            return False
        self.server.tally(local=True)
        self._json(200, answer)
        return True

    def _outside_context(self, raw: bytes) -> str | None:
        """'context N > LIMIT tokens' when the prompt is longer than the adopted context scope (counted with the
        cache: a chat body through the chat template, a completion's prompt as is); None within it, or when it
        cannot be counted here (no scope, no template, not JSON)."""
        limit = self.server.context_scope
        if limit is None:
            return None
        try:
            n = self._prompt_tokens(_json_object(raw))
        except Exception:  # noqa: BLE001 - counting is an observation: a body it cannot count is passed on as is
            return None
        return f"context {n} > {limit} tokens" if n is not None and n > limit else None

    def _prompt_tokens(self, body: dict[str, Any]) -> int | None:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return self.server.cache.count(prompt, add_special_tokens=True)
        template, messages = self.server.renderer.template, body.get("messages")
        if template is None or not isinstance(messages, list):
            return None
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        return self.server.cache.count(template.render(messages, tools), add_special_tokens=False)

    def do_GET(self) -> None:
        if route(self.path) == "/frank/status":
            st = self.server.cache.status().as_dict()
            st.update(
                local_answers=self.server.local_answers,
                passed_through=self.server.passed_through,
                rendering=self.server.renderer.how,
            )
            if self.server.admission is not None:
                st["admission"] = self.server.admission.counts()
            self._json(200, st)
            return
        self._pass_through(b"")

    def do_PUT(self) -> None:
        self._pass_with_body()

    def do_DELETE(self) -> None:
        self._pass_with_body()

    def do_OPTIONS(self) -> None:
        self._pass_with_body()

    def do_PATCH(self) -> None:
        self._pass_with_body()

    def do_HEAD(self) -> None:
        self._pass_through(b"")

    def _pass_with_body(self) -> None:
        try:
            raw = self._read_body()
        except BadRequest as exc:
            bad_request(self, exc)
            return
        self._pass_through(raw)

    # ------------------------------------------------------------------ local answers
    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """llama.cpp's ``{"content"}`` is answered here; another engine's shape (vLLM/SGLang ``{"prompt"}`` or
        ``{"messages"}``, with their ``count`` and ``max_model_len``) and ``with_pieces`` go to the engine."""
        if body.get("with_pieces") or "content" not in body:
            return None
        return {"tokens": self.server.cache.encode(_content(body), _flag(body, "add_special"))}

    def _count(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"count": self.server.cache.count(_content(body), _flag(body, "add_special"))}

    def _count_messages(self, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            text = self.server.renderer.render(body)
        except Unrenderable:
            return None
        return {"input_tokens": self.server.cache.count(text, add_special_tokens=False)}

    # ------------------------------------------------------------------ pass-through
    def _pass_through(self, raw: bytes) -> None:
        """To the engine: the head is the client's fields less the hop-by-hop ones, sent before anything else is
        done (the count of passed requests is kept after the answer)."""
        headers = self.headers.lines(HOP_HEADERS)
        server = self.server
        if self.command == "POST" and server.context_scope is not None:
            self._to_count = raw
        try:
            resp = server.pool.open(self.command, self.path, raw or None, headers, server.upstream_slots)
        except TransportError as exc:
            self._upstream_failed(exc)
            return
        try:
            self._relay(resp)
        finally:
            resp.close()
            self.server.tally(local=False)

    def _relay(self, resp: PooledAnswer | PlainPooledAnswer) -> None:
        """The answer as it arrives, its head made in one call (``answer_head``): with its length when the engine
        gave one (head and body leave in one send), chunked otherwise (each piece sent as it comes: SSE events reach
        the client at once)."""
        status, send = resp.status_code, self.connection.sendall
        self._engine_error = status >= 500
        try:
            if self.command == "HEAD" or status in NO_BODY:  # the engine's length, no body
                send(self.answer_head(status, resp.headers, bodiless_length(status, resp.headers)))
            elif resp.length is not None:
                head = self.answer_head(status, resp.headers, b"Content-Length: %d\r\n" % resp.length)
                if resp.length <= READ_BUFFER:  # head and body in one send, no buffered writer between
                    send(head + resp.read())
                    return
                send(head)
                for piece in resp.iter_raw():
                    send(piece)
            else:  # the head in one send of its own: the client reads it while the engine works
                send(self.answer_head(status, resp.headers, b"Transfer-Encoding: chunked\r\n"))
                self._relay_chunks(resp)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left; closing the upstream response ends the stream
        except TransportError:
            self._engine_error = True
            self.close_connection = True  # the upstream died mid-body: end it short (or without the final chunk)

    def _relay_chunks(self, resp: PooledAnswer | PlainPooledAnswer) -> None:
        if resp.chunked:
            self._relay_framed(resp)
            return
        send = self.connection.sendall
        for chunk in resp.iter_raw():  # a body ended by the engine's close: chunked here
            if chunk:
                send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        send(b"0\r\n\r\n")

    def _relay_framed(self, resp: PooledAnswer | PlainPooledAnswer) -> None:
        """The engine's chunks as the bytes it sent, each read sent on at once: no decoding and re-chunking.
        The head goes first, as soon as the engine's came (the client reads it while the engine works), then each
        piece straight to the socket. The final 0-chunk reaches the client only if the framing before it was whole
        (a broken or cut stream ends without it). An event stream's final chunk goes with its ``data: [DONE]``
        event; what the engine sends after that event is read to its end, and chunks among it (none from an
        engine that keeps the protocol) count as an engine error."""
        framing = resp.framing()
        resp.pump_framed(self.connection.sendall, framing)
        if framing.late:
            self._engine_error = True

    # ------------------------------------------------------------------ plumbing
    def _read_body(self) -> bytes:
        return read_body(self, self.server.max_body_bytes)

    def _json(self, status: int, obj: Mapping[str, Any]) -> None:
        send_json(self, status, obj)


_LOCAL = {
    "/tokenize": _Handler._tokenize,
    "/count": _Handler._count,
    "/v1/messages/count_tokens": _Handler._count_messages,
}


def route(path: str) -> str:
    """A request target's path without query, fragment and trailing slash (``urlsplit`` only for a target in
    absolute form: the usual one is split with two ``partition`` calls on every request's path)."""
    if path.startswith("/"):
        return path.partition("?")[0].partition("#")[0].rstrip("/")
    return urlsplit(path).path.rstrip("/")


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        obj = loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise BadRequest("body must be a JSON object")
    return obj


def _content(body: dict[str, Any]) -> str:
    content = body.get("content")
    if not isinstance(content, str):
        raise BadRequest("'content' must be a string")
    return content


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"'{name}' must be true or false")
    return value


class Front:
    """A running front in a background thread: ``url``, ``server`` (counters, cache), ``shutdown()``."""

    def __init__(self, server: FrontServer) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever, name="frank-serve-front", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
        self.server.pool.close()

    def __enter__(self) -> Front:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def start_front(
    upstream: str,
    cache: Counter,
    *,
    renderer: Renderer | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_s: float = 600.0,
    observe: ServedLog | None = None,
    admission: Admission | None = None,
    context_scope: int | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Front:
    """Serve the front in a background thread (``port=0``: a free port); a request body above
    ``max_body_bytes`` is answered 413."""
    if not upstream.startswith(("http://", "https://")):
        raise FrankError(f"upstream {upstream!r}: expected an http:// or https:// URL")
    try:
        server = FrontServer(
            (host, port), upstream, cache, renderer or Renderer(None), timeout_s, observe, admission, context_scope
        )
    except OSError as exc:
        raise FrankError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    server.max_body_bytes = max_body_bytes
    return Front(server)
