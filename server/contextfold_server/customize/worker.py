"""The sandbox worker: runs expressions and templates for the server, one at a time, in a process of its own.

It speaks length-prefixed pickles on stdin and stdout with the server that
started it, and only with it. An expression or template that runs too long is
stopped by the server killing this process; one that grabs too much memory
fails here, against the address-space limit.
"""

from __future__ import annotations

import pickle
import resource
import signal
import struct
import sys
from typing import BinaryIO

from . import expressions, templates
from .expressions import evaluate_expression
from .templates import render_template

MEMORY_LIMIT = 1024 * 1024 * 1024
_HEADER = struct.Struct(">I")
READY = b"R"


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        kind, source, data = pickle.loads(stdin.read(size))
        try:
            value = render_template(source, data) if kind == "format" else evaluate_expression(source, kind, data)
            reply = (True, value)
        except MemoryError:
            reply = (False, f"MemoryError: over the sandbox's {MEMORY_LIMIT // 2**20} MiB")
        except Exception as error:  # noqa: BLE001 - every failure is the expression's or template's, reported back.
            reply = (False, f"{type(error).__name__}: {error}")
        payload = pickle.dumps(reply)
        stdout.write(_HEADER.pack(len(payload)) + payload)
        stdout.flush()


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
