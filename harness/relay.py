"""A loopback port relaying to a server until it is cut: then the service is down for whoever dials it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Relay:
    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            try:
                outbound = socket.create_connection(self._target)
            except OSError:
                inbound.close()
                continue
            with self._lock:
                self._sockets |= {inbound, outbound}
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and drop those open: the service is down."""
        # Shut down first: that wakes the thread waiting in accept(), which a close alone does not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for open_socket in self._sockets:
                with contextlib.suppress(OSError):
                    open_socket.shutdown(socket.SHUT_RDWR)
                open_socket.close()


@contextlib.contextmanager
def relayed(target: str) -> Iterator[Relay]:
    relay = Relay(target)
    try:
        yield relay
    finally:
        relay.cut()
