"""An upstream test double for the proxies' wire tests: it answers with raw bytes chosen by the test (a real engine
cannot be made to send chunk extensions, trailers, folded headers or a broken chunk) and keeps what it was sent."""

from __future__ import annotations

import re
import socket
import threading
import time


class ScriptedUpstreamTestDouble:
    """A test double for an upstream that answers with raw bytes we choose (a real engine cannot be made to
    send chunk extensions, trailers, folded headers or a broken chunk). Each request gets the next answer of
    ``answers``; ``close_after`` closes the connection after an answer (``close_delay_s`` later: llama-server
    closes ~40 us after a stream, often after the proxy has given the connection back). ``connections`` counts
    accepts."""

    def __init__(self, answers: list[bytes], close_after: bool = False, close_delay_s: float = 0.0) -> None:
        self.answers, self.close_after, self.close_delay_s = list(answers), close_after, close_delay_s
        self.connections = 0
        self.closed = 0  # connections this double has closed
        self.requests: list[bytes] = []  # each request's head
        self.received: list[bytes] = []  # each request whole: head, empty line, body
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        rfile = conn.makefile("rb")
        with conn, rfile:
            while (request := self._read_request(rfile))[0] and self.answers:  # out of answers: open until it closes
                head, body = request
                self.requests.append(head)
                self.received.append(head + b"\r\n" + body)
                conn.sendall(self.answers.pop(0))
                if self.close_after:
                    time.sleep(self.close_delay_s)  # the close comes late, as llama-server's does
                    break
        self.closed += 1

    @staticmethod
    def _read_request(rfile) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
        head = b""
        while (line := rfile.readline()) not in (b"\r\n", b""):
            head += line
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        return head, rfile.read(int(length.group(1)) if length else 0)

    def close(self) -> None:
        self._sock.close()


def exchange(url: str, requests: list[bytes]) -> list[bytes]:
    """Each request sent on one client connection to ``url``; the bytes of each answer (head and body), its Date
    line dropped (it changes with the second). An answer to a ``HEAD``, and a 204 or 304, is its head alone whatever
    its length says (as HTTP clients read them)."""
    host, port = url.removeprefix("http://").split(":")
    out = []
    with socket.create_connection((host, int(port)), timeout=10) as s, s.makefile("rb") as rfile:
        for req in requests:
            s.sendall(req)
            head = b""
            while (line := rfile.readline()) not in (b"\r\n", b""):
                head += b"" if line.startswith(b"Date: ") else line
            if req.startswith(b"HEAD ") or re.match(rb"HTTP/1\.[01] (204|304) ", head):
                body = b""
            elif b"chunked" in head:
                body = b""
                while not body.endswith(b"0\r\n\r\n"):
                    piece = rfile.read1(65536)
                    assert piece, f"the answer ended without its final chunk: {head + body!r}"
                    body += piece
            else:
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                body = rfile.read(int(length.group(1)) if length else 0)
            out.append(head + b"\r\n" + body)
    return out
