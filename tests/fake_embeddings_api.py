"""A stand-in for a third-party OpenAI-compatible `/v1/embeddings` endpoint, on loopback.

Vectors are bags of hashed words, so texts sharing words are similar: enough
to check that contextfold sends, orders and uses what the endpoint returns.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIMENSION = 16


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSION
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMENSION] += 1.0
    return vector if any(vector) else [1.0] + [0.0] * (DIMENSION - 1)


class FakeEmbeddingsAPI:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.failing = False
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if api.failing or self.path != "/v1/embeddings":
                    self.send_response(503 if api.failing else 404)
                    self.end_headers()
                    return
                # Reversed on purpose: clients must order by `index`.
                data = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(body["input"])]
                payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
