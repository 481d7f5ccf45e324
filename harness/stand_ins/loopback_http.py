"""What the stand-ins for third-party HTTP APIs share: a server on a free loopback port answering
POSTs, each in a thread of its own, with what a function of the request returns."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# An answer: the status, the content type, the body.
Answer = tuple[int, str, bytes]


def json_answer(status: int, value: Any) -> Answer:
    return status, "application/json", json.dumps(value).encode()


class LoopbackHTTP:
    """Serves POSTs on 127.0.0.1 with `answer(path, authorization, body)` until `close`."""

    def __init__(self, answer: Callable[[str, str | None, bytes], Answer]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, content_type, payload = answer(self.path, self.headers.get("Authorization"), body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
