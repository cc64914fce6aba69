"""The one HTTP client path to engines: the standard library's ``http.client``, a fresh loopback
connection per request (no keep-alive).

Why not a pooled client: a fresh loopback connection costs a fraction of a millisecond, so the
driver measures the engine and not itself, and there is no race where the server closes an idle
connection just as the client reuses it. Adapters (:mod:`.base`), the streamed request
(:mod:`.stream`), readiness polling (:mod:`.process`) and the agent loop all go through here.
Transport failures surface as ``OSError`` / ``http.client.HTTPException``; callers translate them.
:func:`fetch_url` also takes ``https://`` (``frank serve --upstream https://...``: its ``/tokenize``), the
certificate checked by ``ssl.create_default_context()`` (the system's CAs, or ``SSL_CERT_FILE``); a refused
certificate is an ``ssl.SSLCertVerificationError``, an ``OSError`` like any other transport failure.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

TransportError = (OSError, http.client.HTTPException)


@dataclass
class Answer:
    """A finished, fully read HTTP answer; ``headers`` with lower-case names (a repeated one: its last value)."""

    status_code: int
    content: bytes
    url: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def header_dict(resp: http.client.HTTPResponse) -> dict[str, str]:
    """A response's headers by lower-case name."""
    return {k.lower(): v for k, v in resp.getheaders()}


def split_url(url: str, tls: bool = False) -> tuple[str, int, str]:
    """``http://host:port/path`` → (host, port, path); ``tls``: ``https://`` taken too (port 443 by default)."""
    parts = urlsplit(url)
    if parts.scheme not in (("http", "https") if tls else ("http",)) or not parts.hostname:
        raise ValueError(f"{url!r}: expected an http{'(s)' if tls else ''}://HOST:PORT URL")
    path = parts.path or "/"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port, path + (f"?{parts.query}" if parts.query else "")


def open_request(
    host: str,
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    tls: bool = False,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send a request and return the connection and its response, unread (for streams).
    The caller closes the connection. ``tls``: over TLS, the certificate checked by the default context."""
    conn = (
        http.client.HTTPSConnection(host, port, timeout=timeout_s, context=ssl.create_default_context())
        if tls
        else http.client.HTTPConnection(host, port, timeout=timeout_s)
    )
    try:
        hdrs = {
            "Connection": "close",
            **({"Content-Type": "application/json"} if body is not None else {}),
            **(headers or {}),
        }
        conn.request(method, path, body=body, headers=hdrs)
        return conn, conn.getresponse()
    except BaseException:
        conn.close()
        raise


def fetch(
    host: str,
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    tls: bool = False,
) -> Answer:
    """One request, answer read to its end."""
    conn, resp = open_request(host, port, method, path, body, timeout_s=timeout_s, headers=headers, tls=tls)
    try:
        scheme = "https" if tls else "http"
        return Answer(resp.status, resp.read(), f"{scheme}://{host}:{port}{path}", header_dict(resp))
    finally:
        conn.close()


def fetch_url(
    url: str, method: str = "GET", body: bytes | None = None, *, timeout_s: float, headers: dict[str, str] | None = None
) -> Answer:
    host, port, path = split_url(url, tls=True)
    tls = urlsplit(url).scheme == "https"
    return fetch(host, port, method, path, body, timeout_s=timeout_s, headers=headers, tls=tls)
