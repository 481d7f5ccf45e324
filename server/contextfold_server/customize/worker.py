"""The sandbox worker: compiles and runs expressions and templates for the server, one at a time.

It speaks length-prefixed JSON on stdin and stdout with the server that started
it, and only with it: a request `{"kind", "source", "data"}` (kind `trigger`,
`query` or `format` to run; `check-trigger`, `check-query` or `check-format` to
compile only), a reply `{"ok", "value"}` or `{"ok": false, "error"}`, and
`"retire": true` when the worker has grown past its memory budget and will exit
once it has answered. Compiling happens here too, never in the server: Jinja2
and CEL do real work at compile time, which must not hold the server's event
loop, and a compiled form that grows is held against this process's limits.
One that runs too long is stopped by the server killing this process; one that
grabs too much memory fails here, against the address-space limit.
"""

from __future__ import annotations

import json
import resource
import signal
import struct
import sys
from typing import Any, BinaryIO

from . import expressions, templates
from .expressions import compile_expression, evaluate_expression
from .templates import compile_template, render_template

MEMORY_LIMIT = 1024 * 1024 * 1024
# Past this much resident memory (caches of compiled forms, a large run's leftovers), the
# worker answers, then retires, and the server starts a fresh one in its place.
RETIRE_AT = 256 * 1024 * 1024
_HEADER = struct.Struct(">I")
READY = b"R"


def handle(kind: str, source: str, data: Any) -> Any:
    if kind == "check-format":
        compile_template(source)
        return None
    if kind.startswith("check-"):
        compile_expression(source, kind.removeprefix("check-"))
        return None
    return render_template(source, data) if kind == "format" else evaluate_expression(source, kind, data)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        request = json.loads(stdin.read(size))
        reply: dict[str, Any]
        try:
            reply = {"ok": True, "value": handle(request["kind"], request["source"], request["data"])}
        except MemoryError:
            reply = {"ok": False, "error": f"MemoryError: over the sandbox's {MEMORY_LIMIT // 2**20} MiB"}
        except RecursionError:
            reply = {"ok": False, "error": "RecursionError: it is nested too deeply"}
        except Exception as error:  # noqa: BLE001 - every failure is the expression's or template's, reported back.
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        retire = _resident_bytes() > RETIRE_AT
        if retire:
            reply["retire"] = True
        payload = json.dumps(reply).encode()
        stdout.write(_HEADER.pack(len(payload)) + payload)
        stdout.flush()
        if retire:
            return


if __name__ == "__main__":
    # The server decides when a worker ends (it kills it); Ctrl-C in a terminal reaches the
    # whole process group, and is the server's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    # Load both engines before the first request, not during it, then say so: a
    # request's time limit must not pay for this process starting.
    expressions.environment()
    templates.environment()
    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    serve(sys.stdin.buffer, sys.stdout.buffer)
