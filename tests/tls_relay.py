"""A TLS terminator in front of a real engine, and the engine itself, for the proxies' upstream tests.

``TlsRelayTestDouble`` stands in for nginx/haproxy/a cloud load balancer (none can run here): it accepts TLS
on 127.0.0.1 with a certificate made by the ``openssl`` CLI for ``localhost`` and 127.0.0.1, and relays the
decrypted bytes to a real llama-server unchanged. It counts what a test asserts: TLS connections accepted,
handshakes refused by the client, and request lines that reached it. ``close_all`` closes every open
connection (a terminator's idle timeout), with or without a TLS ``close_notify``.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from frankenstein.engines.process import free_port
from frankenstein.shipped import data_path

from conftest import BASE_ARGS

REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /\S* HTTP/1\.[01]\r\n")


def make_cert(folder: Path, name: str = "relay") -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` and 127.0.0.1 (P-256, one day) and its key, by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is not installed (`make setup` installs it): no certificate for the TLS relay")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


class TlsRelayTestDouble:
    """TEST DOUBLE of a TLS terminator (see the module docstring); ``url`` is its ``https://127.0.0.1:PORT``."""

    def __init__(self, upstream_port: int, context: ssl.SSLContext) -> None:
        self.context = context  # may be swapped: new connections get the new certificate
        self.upstream_port = upstream_port
        self.accepts = 0  # TCP connections accepted
        self.handshakes = 0  # TLS handshakes completed
        self.refused = 0  # handshakes the client broke off (it did not trust the certificate)
        self.requests = 0  # request lines relayed to the engine
        self._open: list[ssl.SSLSocket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepts += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError):
            with self._lock:
                self.refused += 1
            sock.close()
            return
        with self._lock:
            self.handshakes += 1
            self._open.append(tls)
        try:
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as plain:
                self._pump(tls, plain)
        except OSError:
            pass
        finally:
            with self._lock:
                if tls in self._open:
                    self._open.remove(tls)
            tls.close()

    def _pump(self, tls: ssl.SSLSocket, plain: socket.socket) -> None:
        """Bytes both ways until either side closes (one thread: an SSL object is not read and written at once)."""
        while True:
            ready = [tls] if tls.pending() else select.select([tls, plain], [], [])[0]
            if tls in ready:
                data = tls.recv(65536)
                if not data:
                    return
                with self._lock:
                    self.requests += len(REQUEST_LINE.findall(data))
                plain.sendall(data)
            if plain in ready:
                data = plain.recv(65536)
                if not data:
                    return
                tls.sendall(data)

    def close_all(self, notify: bool) -> int:
        """Close every open connection as a terminator's idle timeout does: ``notify``, with a TLS close_notify
        first; else the TCP connection alone (a ragged close). Returns how many were closed."""
        with self._lock:
            conns, self._open = self._open, []
        for tls in conns:
            _close(tls, notify)
        return len(conns)

    def close(self) -> None:
        self._listener.close()
        self.close_all(notify=False)


def _close(tls: ssl.SSLSocket, notify: bool) -> None:
    try:
        if notify:  # close_notify sent; the client's own is not waited for (an idle client sends none)
            tls.settimeout(0.2)
            try:
                tls.unwrap()
            except OSError:
                pass
        tls.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass


@contextmanager
def llama_server(binary: str, log: Path, threads: int = 2) -> Iterator[str]:
    """llama-server on the tiny target, started by the test (never by frank), killed at the end: its URL.
    ``threads``: its compute threads. One is the safe choice for a test that makes thousands of tokens: two
    threads wait for each other at every step, and beside one busy process on these 2 cores 2,000 tokens took
    130-170 s with two and 4.5-5 s with one (4.1-4.4 s alone; 2.5-2.7 s with two, alone)."""
    port = free_port()
    cmd = [binary, "-m", str(data_path("tiny-target.gguf")), "--host", "127.0.0.1", "--port", str(port)]
    args = list(BASE_ARGS)
    args[args.index("--threads") + 1] = str(threads)
    with log.open("w") as out:
        proc = subprocess.Popen([*cmd, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _healthy(url):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "llama-server did not become ready"
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False
