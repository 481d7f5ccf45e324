"""`contextfold serve`: one worker process per core on one port, the bulk workers, and what they share.

Python runs one event loop on one core at a time, so the service runs `--workers`
server processes (`process.py`), each with its own loop, connection pool, model
and sandbox, all listening on the same port: the kernel spreads connections over
them (SO_REUSEPORT, as gRPC's multiprocessing example does). Beside them run
`--bulk-workers` bulk workers (`bulk.py`), at a lower CPU priority, which serve the
bulk calls the workers forward to them (`api/lanes.py`) on Unix sockets in a folder
of this process's. This process starts what they share and no gRPC of its own: the
embedded Postgres (once), the local model's cached export (once, before the workers
would race for it), the port (held, so `--port 0` names one port for all; the
console's too, when it is on), and the admin port, where one scrape of /metrics
covers every worker and bulk worker. It forwards SIGTERM and SIGINT, so every worker
drains, and stops the bulk workers once the workers are done (the calls they
forwarded finish first); it replaces a worker or a bulk worker that dies while
serving, and gives up, exiting non-zero, when one cannot start.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

import psycopg
from prometheus_client import CollectorRegistry, start_http_server

from .access.keys import OPEN_NAMESPACE
from .bulk import run_bulk_worker
from .config import Config, parse_config
from .observe.logs import configure_logging
from .observe.metrics import WorkerMetrics
from .postgres.conninfo import following_the_primary
from .postgres.embedded import DataDirInUse, EmbeddedPostgres, holdings
from .process import run_worker
from .reports import (
    Admitting,
    AllServing,
    DatabaseRestarted,
    Listening,
    OwnPorts,
    Reaching,
    Reconnected,
    Serving,
    SupervisorWord,
    WorkerReport,
)
from .wiring import Shared

logger = logging.getLogger("contextfold")

# Spawned, not forked: a worker starts as a fresh interpreter, so nothing this process
# holds (threads, locks, the embedded Postgres' handles) is copied into it half-made.
_CONTEXT = multiprocessing.get_context("spawn")
# How long past its drain and grace a worker may take to stop before it is killed.
_STOP_MARGIN = 10.0


@dataclass
class _Worker:
    """A worker, or a bulk worker (`bulk`), as the supervisor follows it."""

    index: int
    process: BaseProcess
    reports: Connection
    bulk: bool = False
    admin_port: int | None = None
    serving: bool = False
    served: bool = False
    # False while it is full and refusing calls (its `Admitting` reports).
    admitting: bool = True
    # False while no database of its own answers (its `Reaching` reports).
    reaching: bool = True
    # Whether its end of the pipe is still open (it closes as the worker exits).
    reporting: bool = True
    # True from the embedded Postgres' restart until it reports its connections made good (`Reconnected`).
    reconnecting: bool = False

    @property
    def kind(self) -> str:
        """What the log calls it."""
        return "bulk worker" if self.bulk else "worker"


@dataclass
class _Supervisor:
    config: Config
    shared: Shared
    workers: dict[int, _Worker] = field(default_factory=dict)
    bulk: dict[int, _Worker] = field(default_factory=dict)
    # When stopping: the time by which every worker must have stopped (time.monotonic()).
    stop_by: float | None = None
    # Ports of the supervisor's own (the console's and the admin port, as bound).
    extra_ports: tuple[int, ...] = ()
    announced: bool = False

    @property
    def stopping(self) -> bool:
        return self.stop_by is not None

    def spawn(self, index: int, bulk: bool = False) -> None:
        reports, child_end = _CONTEXT.Pipe()
        process = _CONTEXT.Process(
            target=run_bulk_worker if bulk else run_worker,
            args=(self.config, self.shared, index, child_end),
            name=f"contextfold-{'bulk' if bulk else 'worker'}-{index}",
        )
        process.start()
        child_end.close()
        self.group(bulk)[index] = _Worker(index, process, reports, bulk)

    def group(self, bulk: bool) -> dict[int, _Worker]:
        """The bulk workers, or the workers."""
        return self.bulk if bulk else self.workers

    def everyone(self) -> list[_Worker]:
        """Every worker and bulk worker running."""
        return [*self.workers.values(), *self.bulk.values()]

    def metrics_endpoints(self) -> list[str]:
        ports = [worker.admin_port for worker in self.everyone() if worker.admin_port]
        return [f"http://127.0.0.1:{port}/metrics" for port in ports]

    def heard(self, worker: _Worker, report: WorkerReport) -> None:
        if isinstance(report, Listening):
            worker.admin_port = report.metrics_port
            # Every worker learns every port the server listens on: none may be dialled as a provider.
            self.tell(OwnPorts(self.own_ports()))
            if not self.announced and not worker.bulk:
                self.announced = True
                logger.info(
                    "listening on %s:%d (%s); NOT_SERVING until the database and the model are ready",
                    self.config.host,
                    self.shared.port,
                    _transport(self.config),
                )
        elif isinstance(report, Admitting | Reaching | Reconnected):
            before = self.serving_now()
            if isinstance(report, Admitting):
                worker.admitting = report.admitting
                down = "every worker is full, refusing calls> | NOT_SERVING until one admits"
                up = "a worker admits calls again"
            else:
                worker.reaching = report.reaching
                down = "no worker reaches a database> | NOT_SERVING until one does"
                up = "a worker reaches a database again"
                if isinstance(report, Reconnected):
                    worker.reconnecting = False
                    up = "every worker reconnected to the restarted embedded Postgres"
            if self.serving_now() != before:
                if before:
                    logger.warning("reason=<%s", down)
                else:
                    logger.info("%s | SERVING", up)
                self.tell_all_serving(self.serving_now())
        elif isinstance(report, Serving):
            worker.serving = worker.served = True
            if worker.bulk:
                logger.info("bulk worker serving | bulk_worker=<%d> nice=<%d>", worker.index, self.config.bulk_nice)
            if self.serving_now():
                self.tell_all_serving(True)
                logger.info(
                    "serving on %s:%d | workers=<%d> embedder=<%s> dimension=<%d>",
                    self.config.host,
                    self.shared.port,
                    self.config.workers,
                    report.embedder,
                    report.dimension,
                )

    def ended(self, worker: _Worker) -> int | None:
        """After a worker's process ended: the supervisor's exit code when it must stop, else None."""
        worker.process.join()
        code = worker.process.exitcode
        worker.reports.close()
        kind = worker.kind
        del self.group(worker.bulk)[worker.index]
        if self.stopping:
            if not self.workers:
                # The workers are done, and the calls they forwarded with them: the bulk workers may stop.
                self.signal(self.bulk.values(), signal.SIGTERM)
            return None
        if not worker.served:
            logger.error("%s=<%d> exit_code=<%s> | a %s could not start | stopping", kind, worker.index, code, kind)
            self.stop()
            return 1
        logger.error("%s=<%d> exit_code=<%s> | a %s died | starting another", kind, worker.index, code, kind)
        self.tell_all_serving(False)
        self.spawn(worker.index, worker.bulk)
        return None

    def database_ended(self, embedded: EmbeddedPostgres) -> int | None:
        """After the embedded Postgres' postmaster ended: health says NOT_SERVING at once, and it is
        started again; the supervisor's exit code when it cannot be."""
        code = embedded.ended()
        if code is None or self.stopping:
            return None
        logger.error("exit_code=<%s> | the embedded Postgres stopped | NOT_SERVING, starting it again", code)
        self.tell_all_serving(False)
        try:
            embedded.start()
        except RuntimeError as error:
            logger.error("reason=<%s> | the embedded Postgres cannot start again | stopping", error)
            self.stop()
            return 1
        # Health stays NOT_SERVING until every worker has made its connections good (a reconnection under
        # way in a worker would refuse the first calls): each tells so (`Reconnected`), and the last one's
        # report turns it to SERVING.
        for worker in self.everyone():
            worker.reconnecting = worker.reporting
        self.tell(DatabaseRestarted())
        return None

    def serving_now(self) -> bool:
        """What health says: every worker and bulk worker serves (and has made its connections good since the
        embedded Postgres last restarted), and one worker at least admits calls (not every one is full)."""
        workers = list(self.workers.values())
        bulk = list(self.bulk.values())
        return (
            len(workers) == self.config.workers
            and len(bulk) == self.config.bulk_workers
            and all(worker.serving and not worker.reconnecting for worker in (*workers, *bulk))
            and any(worker.admitting for worker in workers)
            and any(worker.reaching for worker in workers)
        )

    def tell_all_serving(self, all_serving: bool) -> None:
        """Tell every worker whether they all serve: each one's health says so."""
        self.tell(AllServing(all_serving))

    def own_ports(self) -> tuple[int, ...]:
        workers = [worker.admin_port for worker in self.everyone() if worker.admin_port]
        return tuple(sorted({self.shared.port, *self.extra_ports, *workers}))

    def tell(self, word: SupervisorWord) -> None:
        for worker in self.everyone():
            if worker.reporting:
                with contextlib.suppress(OSError):
                    worker.reports.send(word)

    def stop(self) -> None:
        """Every worker drains and stops, then every bulk worker; one that has not stopped within its drain
        and grace (twice over, for the bulk workers, which wait for the workers) is killed."""
        self.stop_by = time.monotonic() + 2 * (self.config.drain_seconds + self.config.grace_seconds) + _STOP_MARGIN
        self.signal(self.workers.values() if self.workers else self.bulk.values(), signal.SIGTERM)

    @staticmethod
    def signal(workers: Iterable[_Worker], signum: int) -> None:
        for worker in workers:
            if worker.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signum)

    def waited_on(self) -> list[Connection | int]:
        """What the supervisor waits on for each worker: its reports while it sends them, its end."""
        return [
            *(worker.reports for worker in self.everyone() if worker.reporting),
            *(worker.process.sentinel for worker in self.everyone()),
        ]

    def kill_the_late(self) -> None:
        for worker in self.everyone():
            logger.error("%s=<%d> | a %s did not stop in time | killing it", worker.kind, worker.index, worker.kind)
            worker.process.kill()


def main(argv: list[str] | None = None) -> None:
    config = parse_config(argv)
    configure_logging(config.log_level, config.log_format)
    sys.exit(supervise(config))


def supervise(config: Config) -> int:
    woken, wake = socket.socketpair()
    wake.setblocking(False)
    signal.set_wakeup_fd(wake.fileno())
    requested: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        requested.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)

    # The embedded Postgres first, as a child of this process: watched, restarted, always stopped.
    embedded = None if config.database_url else EmbeddedPostgres(config.data_dir)
    try:
        return _supervise(config, embedded, woken, wake, requested)
    except DataDirInUse as error:
        logger.error("reason=<%s> | the embedded Postgres' data directory is taken | stopping", error)
        return 1
    finally:
        if embedded is not None:
            embedded.stop()


def _supervise(
    config: Config, embedded: EmbeddedPostgres | None, woken: socket.socket, wake: socket.socket, requested: list[int]
) -> int:
    database_url = embedded.start() if embedded is not None else config.database_url
    if embedded is not None:
        _say_what_the_data_directory_holds(embedded, database_url)
    model = None
    if config.embedder == "local":
        from .embedding.local import exported_model

        model = exported_model(config.model_dir)
    if config.auth == "none":
        _warn_open(config.host)
    reservation, port = _reserve_port(config.host, config.port)
    console = _reserve_port(config.console_host, config.console_port) if config.console_port >= 0 else None
    # The bulk workers' sockets, in a folder only this process's user may enter (mkdtemp makes it so), named for
    # this process: one that a supervisor killed with kill -9 left behind is removed by the next start.
    _remove_left_sockets(Path(tempfile.gettempdir()))
    sockets = Path(tempfile.mkdtemp(prefix=f"{_SOCKETS_PREFIX}{os.getpid()}-"))
    # Every connection to the primary, wherever it is now: of a URL's hosts, the one that takes writes.
    shared = Shared(
        following_the_primary(database_url),
        port,
        model,
        config.database_migration_url and following_the_primary(config.database_migration_url),
        console[1] if console else None,
        bulk_addresses=tuple(str(sockets / f"bulk-{index}.sock") for index in range(config.bulk_workers)),
        embedded_database=embedded is not None,
    )
    supervisor = _Supervisor(config, shared)
    if console is not None:
        supervisor.extra_ports = (console[1],)
        logger.info("console on http://%s:%d/", config.console_host, console[1])
    if config.admin_port >= 0:
        registry = CollectorRegistry()
        registry.register(WorkerMetrics(supervisor.metrics_endpoints))
        metrics_server, _ = start_http_server(config.admin_port, addr=config.admin_host, registry=registry)
        supervisor.extra_ports = (*supervisor.extra_ports, metrics_server.server_port)
        logger.info("metrics on http://%s:%d/metrics", config.admin_host, metrics_server.server_port)
    for index in range(config.bulk_workers):
        supervisor.spawn(index, bulk=True)
    for index in range(config.workers):
        supervisor.spawn(index)

    exit_code = 0
    with reservation, console[0] if console else contextlib.nullcontext(), woken, wake:
        try:
            exit_code = _follow(supervisor, embedded, woken, requested)
        finally:
            shutil.rmtree(sockets, ignore_errors=True)
    logger.info("stopped")
    return exit_code


def _follow(
    supervisor: _Supervisor, embedded: EmbeddedPostgres | None, woken: socket.socket, requested: list[int]
) -> int:
    """Follow the workers and the bulk workers, the embedded Postgres and the signals, until every process
    has stopped; the exit code."""
    config = supervisor.config
    exit_code = 0
    while supervisor.everyone():
        left = None if supervisor.stop_by is None else max(0.0, supervisor.stop_by - time.monotonic())
        database = [embedded.sentinel] if embedded is not None and embedded.watched else []
        ready = wait([woken, *database, *supervisor.waited_on()], timeout=left)
        if not ready and supervisor.stopping:
            supervisor.kill_the_late()
        if woken in ready:
            woken.recv(64)
        if database and database[0] in ready and embedded is not None:
            exit_code = supervisor.database_ended(embedded) or exit_code
        if requested and not supervisor.stopping:
            logger.info("stopping | signal=<%s> workers=<%d>", signal.Signals(requested[0]).name, config.workers)
            supervisor.stop()
        for worker in supervisor.everyone():
            if worker.reports in ready:
                try:
                    supervisor.heard(worker, worker.reports.recv())
                except EOFError:
                    worker.serving = worker.reporting = False
            if worker.process.sentinel in ready:
                exit_code = supervisor.ended(worker) or exit_code
    return exit_code


_SOCKETS_PREFIX = "contextfold-bulk-"


def _remove_left_sockets(folder: Path) -> None:
    """Remove the bulk workers' socket folders in `folder` that supervisors of this user left behind as they
    were killed: each is named for its supervisor's pid, and only one whose process is gone is removed (a pid
    now another process's is left: it may be a live supervisor's)."""
    uid = os.getuid()
    for left in folder.glob(f"{_SOCKETS_PREFIX}*-*"):
        pid = left.name.removeprefix(_SOCKETS_PREFIX).split("-", 1)[0]
        try:
            if not pid.isdigit() or left.is_symlink() or left.stat().st_uid != uid or not left.is_dir():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(left, ignore_errors=True)
        except OSError:
            continue


def _say_what_the_data_directory_holds(embedded: EmbeddedPostgres, url: str) -> None:
    """One line at start: the embedded Postgres' data directory, and what earlier runs left in it (their
    entries are searched as this run's are), with how to start clean."""
    try:
        stores, entries = holdings(url)
    except psycopg.Error as error:
        logger.warning("reason=<%s> | data directory %s: what it holds could not be read", error, embedded.data_dir)
        return
    if not stores:
        logger.info("data directory %s (the embedded Postgres): no stores yet", embedded.data_dir)
        return
    logger.info(
        "data directory %s (the embedded Postgres) holds %d store%s and %d entr%s from earlier runs, searched as"
        " this run's are; to start clean, give --data-dir a new folder (or stop the server and remove this one)",
        embedded.data_dir,
        stores,
        "" if stores == 1 else "s",
        entries,
        "y" if entries == 1 else "ies",
    )


def _reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """Hold `host:port` (a free one for 0) with SO_REUSEPORT, so the workers can share it.

    The port is first bound without SO_REUSEPORT: a port another server (say, a second
    `make run`) already listens on is refused, rather than silently shared with it.
    """
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise SystemExit(f"error: {host}:{port} is in use by another server") from None
                raise
    reservation = socket.socket(family, socket.SOCK_STREAM)
    reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reservation.bind(address)
    return reservation, reservation.getsockname()[1]


def _warn_open(host: str) -> None:
    """Say loudly that the service runs open, and louder when it listens beyond this machine."""
    try:
        local = all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        local = False
    logger.warning(
        "the service is OPEN (--auth none): no API keys, every caller acts as an admin of namespace %r%s",
        OPEN_NAMESPACE,
        "" if local else f"; {host} is reachable from other machines: use --auth keys there",
    )


def _transport(config: Config) -> str:
    if config.tls_client_ca_file:
        return "mutual TLS"
    return "TLS" if config.tls_cert_file else "plaintext"


if __name__ == "__main__":
    main()
