"""A stand-in for the model APIs an agent calls (OpenAI Chat Completions and Responses, Anthropic
Messages, Bedrock Converse), on loopback, recording exactly what each request brought: method,
path, headers and the body's bytes.

Each route answers in its API's shape with a fixed reply (`REPLY`); a Chat Completions request with
`"stream": true` is answered as a server-sent event stream, sent in chunks with a pause between
them (`STREAM`, the bytes in order), so a test can check it arrives whole.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "The stand-in's answer."
STREAM = [
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"The "}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"answer."}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _answer(path: str, body: bytes) -> Any:
    path = path.split("?", 1)[0]
    if path.endswith("/chat/completions"):
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    if path.endswith("/responses"):
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": "stand-in",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": REPLY, "annotations": []}],
                }
            ],
        }
    if path.endswith("/v1/messages"):
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "stand-in",
            "content": [{"type": "text", "text": REPLY}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    if re.search(r"/model/[^/]+/converse", path):
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": REPLY}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        }
    return {"echo": len(body)}


class ModelAPIs:
    """Serves the model routes on 127.0.0.1 until `close`; `received` holds every request, in order."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # A real API answers at once: no small write of the answer waits on an acknowledgement.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._chunked()
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {name.lower(): value for name, value in self.headers.items()}
                received.append(Received(self.command, self.path, headers, body))
                try:
                    streaming = json.loads(body).get("stream") is True
                except (ValueError, AttributeError):
                    streaming = False
                if streaming and self.path.split("?", 1)[0].endswith("/chat/completions"):
                    self._stream()
                    return
                payload = json.dumps(_answer(self.path, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _chunked(self) -> bytes:
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()

            def _stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in STREAM:
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.02)
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def last(self) -> Received:
        return self.received[-1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
