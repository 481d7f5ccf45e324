"""Crashes, with the real embedded Postgres: whatever dies, the service comes back by itself and loses
no acknowledged write, and a clean stop always stops the database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import psutil
import pytest
from contextfold import Client
from contextfold.errors import ContextfoldError
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from harness.polling import wait_for
from harness.servers import health_status, running, start_server


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    """Every Postgres process working in `data_dir` (each keeps it as its working directory)."""
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == "postgres" and Path(process.cwd()) == data_dir.resolve():
                found.append(process)
        except psutil.Error:
            continue
    return found


def write(address: str, store: str, count: int, prefix: str) -> list[str]:
    """Entries written one call at a time; the ids whose writes were acknowledged."""
    acknowledged = []
    with Client(address) as cf:
        for n in range(count):
            (added,) = cf.add_memories(store, [{"id": f"{prefix}-{n}", "content": f"{prefix} fact {n}"}])
            acknowledged.append(added.id)
    return acknowledged


def keep_reading(address: str, store: str, memory_id: str, until: threading.Event) -> None:
    """Reads, failing or not, one after another until `until` is set: of one entry (a query, which a worker
    answers) and of the store's listing (bulk work, which a bulk worker answers), so that both kinds of
    process find the database gone."""
    with Client(address) as cf:
        while not until.is_set():
            with contextlib.suppress(ContextfoldError):
                cf.get_memory(memory_id)
            with contextlib.suppress(ContextfoldError):
                list(cf.list_memories(store))


def read_once(address: str, memory_id: str) -> str:
    """One read of an entry, not retried: its content."""
    with grpc.insecure_channel(address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        return stub.GetMemory(memory_pb2.GetMemoryRequest(id=memory_id), timeout=10).memory.content


def test_after_kill_9_of_server_and_postmaster_a_restart_serves_within_15s_with_every_write(tmp_path) -> None:
    data_dir = tmp_path / "pgdata"
    first = start_server(tmp_path / "first.log", "--data-dir", str(data_dir))
    with Client(first.address) as cf:
        cf.create_store("kept")
    acknowledged = write(first.address, "kept", 30, "before")
    postmaster = postmaster_pid(data_dir)
    # Everything at once: the supervisor (its workers follow it) and the database.
    os.kill(first.process.pid, signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)
    first.process.wait(10)
    # The killed supervisor could not remove its bulk workers' socket folder: the next start does.
    left = list(Path(tempfile.gettempdir()).glob(f"contextfold-bulk-{first.process.pid}-*"))
    assert left

    restarted = time.monotonic()
    second = start_server(tmp_path / "second.log", "--data-dir", str(data_dir), timeout=60)
    try:
        assert time.monotonic() - restarted < 15, second.log()
        assert not any(folder.exists() for folder in left)
        with Client(second.address) as cf:
            assert sorted(m.id for m in cf.list_memories("kept")) == sorted(acknowledged)
            assert cf.get_memory(acknowledged[-1]).content == "before fact 29"
    finally:
        assert second.stop() == 0, second.log()
    # A clean stop stops the database, also after a crash.
    assert postgres_processes(data_dir) == []


def test_the_postmaster_dying_under_a_running_server_is_restarted_and_health_follows(tmp_path) -> None:
    data_dir = tmp_path / "pgdata"
    server = start_server(tmp_path / "server.log", "--data-dir", str(data_dir))
    try:
        with Client(server.address) as cf:
            cf.create_store("kept")
        acknowledged = write(server.address, "kept", 5, "before")
        seen: list[str] = []

        def health() -> str:
            status = health_status(server.address)
            if not seen or seen[-1] != status:
                seen.append(status)
            return status

        # Three times over, with calls all through each outage: each call that fails sets the worker
        # reconnecting, and health may say SERVING only once no reconnection is left to refuse the next call.
        for round_ in range(3):
            old = postmaster_pid(data_dir)
            outage = threading.Event()
            caller = threading.Thread(target=keep_reading, args=(server.address, "kept", acknowledged[0], outage))
            caller.start()
            try:
                os.kill(old, signal.SIGKILL)
                wait_for(lambda: health() == "NOT_SERVING", 10, what="health to say NOT_SERVING")
                wait_for(lambda: health() == "SERVING", 30, what="health to say SERVING again")
            finally:
                outage.set()
                caller.join()
            assert seen[-2:] == ["NOT_SERVING", "SERVING"]
            assert postmaster_pid(data_dir) != old and running(postmaster_pid(data_dir))
            # Reads and writes work again, from the first call (neither is retried): lost connections were
            # replaced, and no reconnection under way refuses them.
            assert read_once(server.address, acknowledged[0]) == "before fact 0"
            acknowledged += write(server.address, "kept", 5, f"after-{round_}")
            with Client(server.address) as cf:
                assert sorted(m.id for m in cf.list_memories("kept")) == sorted(acknowledged)
        assert server.log().count("the embedded Postgres stopped") == 3
    finally:
        assert server.stop() == 0, server.log()
    assert postgres_processes(data_dir) == []


def test_a_stale_pid_file_naming_a_live_process_or_a_zombie_is_not_taken_for_a_server(tmp_path) -> None:
    data_dir = tmp_path / "pgdata"
    first = start_server(tmp_path / "first.log", "--data-dir", str(data_dir))
    with Client(first.address) as cf:
        cf.create_store("kept")
        cf.add_memories("kept", [{"id": "k1", "content": "The boat is called Tern"}])
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    wait_for(lambda: not postgres_processes(data_dir), 30, what="the orphaned postmaster to stop")
    pid_file = (data_dir / "postmaster.pid").read_text().splitlines() if (data_dir / "postmaster.pid").exists() else []

    # A process of another kind now holds a pid that the pid file names, and then a zombie does.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE, 10, what="a zombie")
    try:
        for impostor in (bystander.pid, zombie.pid):
            lines = pid_file or ["0", str(data_dir), "0", "5432", str(data_dir), "", "0 0", "ready"]
            (data_dir / "postmaster.pid").write_text("\n".join([str(impostor), *lines[1:]]) + "\n")
            server = start_server(tmp_path / f"after-{impostor}.log", "--data-dir", str(data_dir), timeout=60)
            try:
                with Client(server.address) as cf:
                    assert cf.get_memory("k1").content == "The boat is called Tern"
            finally:
                assert server.stop() == 0, server.log()
            assert postgres_processes(data_dir) == []
    finally:
        bystander.kill()
        bystander.wait()
        zombie.wait()


def test_a_second_server_on_the_same_data_directory_is_refused(tmp_path) -> None:
    data_dir = tmp_path / "pgdata"
    first = start_server(tmp_path / "first.log", "--data-dir", str(data_dir))
    try:
        with pytest.raises(RuntimeError) as raised:
            start_server(tmp_path / "second.log", "--data-dir", str(data_dir), timeout=30)
        assert "is in use by contextfold" in str(raised.value)
        assert health_status(first.address) == "SERVING"
    finally:
        assert first.stop() == 0, first.log()
