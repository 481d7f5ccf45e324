"""Real processes the tests run: the contextfold server, and Postgres from the embedded package."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import psycopg
from contextfold_server.postgres.embedded import EmbeddedPostgres
from grpc_health.v1 import health_pb2, health_pb2_grpc

from . import shell
from .polling import wait_for

READY = re.compile(r"serving on [^:]+:(\d+)")


@dataclass
class ServerProcess:
    process: subprocess.Popen
    address: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an orchestrator would; the exit code."""
        return terminate(self.process, timeout)

    def scrape(self) -> str:
        """What the server's admin port serves at /metrics, every worker's metrics summed."""
        found = re.search(r"metrics on http://[^:]+:(\d+)/metrics", self.log())
        if found is None:
            raise RuntimeError(f"the server logged no metrics address:\n{self.log()}")
        port = found.group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.read().decode()


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample, matched by name and the labels given (others may be present)."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels}")


def terminate(process: subprocess.Popen, timeout: float = 10.0) -> int:
    """SIGTERM to a process of the tests' own, killed if it has not ended within `timeout`; its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


SERVE = (sys.executable, "-m", "contextfold.cli", "serve")
ROOT = Path(__file__).resolve().parent.parent


def start_server(
    log_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
    command: tuple[str, ...] = SERVE,
    credentials: grpc.ChannelCredentials | None = None,
    workers: int | None = 1,
) -> ServerProcess:
    """Start `contextfold serve`, as `make run` does, on a free loopback port; wait until health says SERVING.

    One worker unless a test asks for more (None: the default, one per core): its calls, its log
    and its metrics are then one event loop's, and the suite starts one model per server.
    """
    log = log_path.open("w")
    worker_option = () if workers is None or "--workers" in args else ("--workers", str(workers))
    # Open, as `make run` is, unless the test asks for keys.
    auth_option = () if "--auth" in args else ("--auth", "none")
    process = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", "0", "--admin-port", "0", *worker_option, *auth_option, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        # A process group of its own, as a terminal gives a command: a test may signal it whole.
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )
    return awaiting(process, log_path, timeout, credentials)


def awaiting(
    process: subprocess.Popen, log_path: Path, timeout: float, credentials: grpc.ChannelCredentials | None = None
) -> ServerProcess:
    """The server `process` started, once its log says which port it serves on and health says SERVING."""
    started = time.monotonic()

    def ready() -> re.Match[str] | None:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        return READY.search(log_path.read_text(errors="replace"))

    try:
        match = wait_for(ready, timeout, what="the server to log that it serves")
    except AssertionError:
        os.killpg(process.pid, signal.SIGKILL)
        raise RuntimeError(f"server did not start in {timeout}s:\n{log_path.read_text()}") from None
    address = f"127.0.0.1:{match.group(1)}"
    wait_serving(address, timeout - (time.monotonic() - started), credentials)
    return ServerProcess(process, address, log_path)


@contextlib.contextmanager
def serving(root: Path, *args: str) -> Iterator[ServerProcess]:
    """A server with its own embedded Postgres under `root`, stopped (and checked to exit 0) after use."""
    process = start_server(root / "server.log", "--data-dir", str(root / "pgdata"), *args)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


@contextlib.contextmanager
def serving_printed(command: str, root: Path, timeout: float = 180.0) -> Iterator[ServerProcess]:
    """A page's command that starts the server (`make run`, `make run ARGS=…`), run by bash from the
    checkout as printed, what it leaves to the environment set so it stays the test's own: its embedded
    Postgres under `root`, free loopback ports, one worker. Stopped as a terminal's Ctrl-C stops it (a
    signal to its process group: make and the server), and checked to have stopped cleanly."""
    log_path = root / "server.log"
    with log_path.open("w") as log:
        process = shell.start(
            command,
            ROOT,
            log,
            subprocess.STDOUT,
            CONTEXTFOLD_DATA_DIR=str(root / "pgdata"),
            CONTEXTFOLD_PORT="0",
            CONTEXTFOLD_ADMIN_PORT="0",
            CONTEXTFOLD_WORKERS="1",
            HF_HUB_OFFLINE="1",
        )
    server = awaiting(process, log_path, timeout)
    try:
        yield server
    finally:
        shell.stop_group(process, signal.SIGINT, timeout=60)
        assert '"message": "stopped"' in server.log(), server.log()
        assert "Traceback" not in server.log(), server.log()


@contextlib.contextmanager
def provider_fixtures() -> Iterator[dict[str, int]]:
    """The providers of `harness.providers`, in a process of their own: each behaviour's port."""
    process = subprocess.Popen([sys.executable, "-m", "harness.providers"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None  # piped above
    try:
        yield json.loads(process.stdout.readline())
    finally:
        terminate(process)


def health_status(address: str, timeout: float = 10.0, credentials: grpc.ChannelCredentials | None = None) -> str:
    """What the server's health service says: SERVING, NOT_SERVING, …"""
    channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    with channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def wait_serving(address: str, timeout: float, credentials: grpc.ChannelCredentials | None = None) -> None:
    channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(), timeout=max(timeout, 1.0), wait_for_ready=True)
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def free_port() -> int:
    """A loopback port nothing listens on now, for a process that must be told its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def live_children(parent: psutil.Process, *, recursive: bool = False) -> Iterator[tuple[psutil.Process, str]]:
    """A process's children that still run, each with its command line. A child that ended and is not
    reaped yet (a zombie: a worker an earlier test killed, say) or that is gone by the time it is read
    is passed over: reading its command line would raise."""
    for child in parent.children(recursive=recursive):
        try:
            yield child, " ".join(child.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue


def server_processes(supervisor: psutil.Process) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """The supervisor's workers and its bulk workers, told apart by their CPU priority (the bulk workers'
    is lower, `--bulk-nice`)."""
    children = [child for child, command in live_children(supervisor) if "spawn_main" in command]
    workers = [child for child in children if child.nice() == supervisor.nice()]
    return workers, [child for child in children if child.nice() > supervisor.nice()]


def running(pid: int) -> bool:
    """Whether a process runs (one that ended but was not reaped yet, a zombie, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def postgres_binary(name: str) -> Path:
    """One of the embedded Postgres' programs (pg_dump, pg_basebackup, …)."""
    from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / name


class Postgres:
    """A Postgres with pgvector of the tests' own (the server's embedded one, run by the test), which
    a test may stop and start again."""

    def __init__(self, data_dir: Path) -> None:
        self._server = EmbeddedPostgres(data_dir)
        self.url = self._server.start()

    def kill(self) -> None:
        """Stop the server at once, dropping every connection (a fast shutdown)."""
        pid = self._server.pid
        assert pid is not None
        os.kill(pid, signal.SIGINT)
        wait_for(lambda: not running(pid), 30, what="postgres to stop")

    def restart(self) -> None:
        """Start the server again on the same data and socket, after `kill`."""
        self._server.ended()
        assert self._server.start() == self.url

    def crash(self) -> None:
        """Kill the server and every process of it with SIGKILL, as a machine that dies would: nothing is
        flushed, no session is told, its socket stops answering."""
        pid = self._server.pid
        assert pid is not None
        postmaster = psutil.Process(pid)
        for process in [postmaster, *postmaster.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        wait_for(lambda: not running(pid), 30, what="postgres to die")
        self._server.ended()

    def promote(self) -> None:
        """Promote this standby to a primary as an operator would, waiting until it takes writes: `pg_promote()`,
        what `pg_ctl promote` asks the server for. Asked over a connection, not by running `pg_ctl` as the
        server's user: a process forked from a test's, whose gRPC threads are running, once died before it
        could run (SIGSEGV)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_promote(true, 60)").fetchone()
        assert row is not None and row[0], "the standby did not take writes within 60 s of its promotion"

    @property
    def socket_dir(self) -> Path:
        return self._server.socket_dir

    def cleanup(self) -> None:
        self._server.stop()
        shutil.rmtree(self._server.data_dir, ignore_errors=True)

    def standby(self, data_dir: Path) -> Postgres:
        """A streaming replica of this server, started: a base backup of it (`pg_basebackup -R`, from
        the bundled binaries) that replays its changes as they come."""
        backup = postgres_binary("pg_basebackup")
        subprocess.run(
            [str(backup), "-D", str(data_dir), "-d", self.url, "-R", "-X", "stream", "-c", "fast"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        # The copy holds what is the primary's own: its socket's lock file and its log.
        for leftover in [*data_dir.glob(".s.PGSQL.*"), data_dir / "log"]:
            leftover.unlink(missing_ok=True)
        user = self._server.system_user
        if user is not None:
            for folder, _, files in os.walk(data_dir):
                for path in (folder, *(os.path.join(folder, name) for name in files)):
                    shutil.chown(path, user, user)
        return Postgres(data_dir)

    def log(self) -> str:
        return (self._server.data_dir / "log").read_text(errors="replace")

    def url_of(self, database: str) -> str:
        """The URL of another database of this server."""
        return self.url.replace("/postgres?", f"/{database}?", 1)

    def query(self, statement: str, params: tuple = ()) -> list[tuple]:
        """Run one statement as the superuser; its rows."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def sentences_settled(self, timeout: float = 600.0) -> None:
        """Wait until the server's bulk workers have embedded the sentences of every entry written (none waits:
        memory/sentences.py), as a search that finds entries by their sentences needs."""
        waiting = "SELECT count(*) FROM contextfold.memories WHERE sentences_state < 2"
        wait_for(lambda: self.query(waiting)[0][0] == 0, timeout, what="the entries' sentences to be embedded")
