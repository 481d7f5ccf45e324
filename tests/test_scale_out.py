"""Scale-out: two replicas on one Postgres behind Debian's nginx (`grpc_pass`, round robin).

The service holds no state of its own, so any replica serves any call: calls through
the proxy reach both, each reading what the other stored, and when one replica is
sent SIGTERM under load, no call fails (the proxy retries refused connections; the
client retries reads cut off by the stop). nginx comes from the Debian archive: the
installed one, or the package unpacked here (no root needed).
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from contextfold import Client

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, free_port, start_server


def nginx_binary(cache: Path) -> Path:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    unpacked = cache / "root" / "usr" / "sbin" / "nginx"
    if not unpacked.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "nginx"], cwd=cache, check=True, capture_output=True, timeout=300)
        (package,) = cache.glob("nginx_*.deb")
        subprocess.run(["dpkg", "-x", str(package), str(cache / "root")], check=True, timeout=60)
    return unpacked


NGINX_CONF = """
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    upstream contextfold {{
        server {first};
        server {second};
        # Long-lived HTTP/2 connections to each replica, as a mesh sidecar keeps them: a
        # stopping replica says GOAWAY on them, and new calls go to the other one.
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            grpc_pass grpc://contextfold;
            # A replica that is stopping refuses the connection (or the stream) before the
            # call runs; nginx then tries the other one.
            grpc_next_upstream error timeout http_502 http_503 non_idempotent;
            grpc_next_upstream_tries 2;
        }}
    }}
}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("scale-out")
    database = Postgres(root / "pgdata")
    replicas = [
        start_server(root / f"replica-{n}.log", "--database-url", database.url, "--grace-seconds", "10") for n in (1, 2)
    ]
    nginx_root = root / "nginx"
    nginx_root.mkdir()
    port = free_port()
    conf = nginx_root / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(root=nginx_root, port=port, first=replicas[0].address, second=replicas[1].address)
    )
    binary = nginx_binary(tmp_path_factory.getbasetemp() / "nginx-package")
    nginx = subprocess.Popen(
        [str(binary), "-p", str(nginx_root), "-c", str(conf), "-e", str(nginx_root / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def accepting() -> bool:
        assert nginx.poll() is None, nginx.stderr.read()
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    wait_for(accepting, 30, what="nginx to accept connections", retrying=(OSError,))
    yield {"address": f"127.0.0.1:{port}", "replicas": replicas, "nginx_root": nginx_root}
    nginx.terminate()
    nginx.wait(10)
    for replica in replicas:
        replica.stop()
    database.cleanup()


def calls_served(replica: ServerProcess, method: str = "Inject") -> int:
    lines = [json.loads(line) for line in replica.log().splitlines() if line.startswith("{")]
    return sum(1 for line in lines if line.get("message") == "call" and line.get("method", "").endswith(method))


def test_any_replica_serves_any_call(cluster: dict) -> None:
    first, second = cluster["replicas"]
    with Client(cluster["address"], timeout=30) as cf:
        store = unique("shared")
        cf.create_store(store)
        cf.add_memories(store, ["The user's favourite colour is green"])
        results = [cf.inject([user("What colour do I like?")], stores=[store]) for _ in range(10)]
    assert all("green" in json.dumps(result.messages) for result in results)
    # Round robin: both replicas served Injects, each reading what the other stored.
    assert calls_served(first) >= 3 and calls_served(second) >= 3


def test_a_replica_stopped_under_load_fails_no_call(cluster: dict) -> None:
    first, second = cluster["replicas"]
    with Client(cluster["address"], timeout=30) as cf:
        store = unique("load")
        cf.create_store(store)
        cf.add_memories(store, ["The user works night shifts"])
        before = calls_served(second)
        stop = threading.Event()
        failures: list[str] = []
        served = 0

        def agent() -> None:
            nonlocal served
            while not stop.is_set():
                try:
                    result = cf.inject([user("When do I work?")], stores=[store])
                    assert "night shifts" in json.dumps(result.messages)
                    served += 1
                except Exception as error:  # noqa: BLE001 - every failure is the finding
                    failures.append(repr(error))

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            running = [pool.submit(agent) for _ in range(8)]
            wait_for(lambda: served >= 40, 60, what="the load to be under way")
            stopped_at = served
            first.process.send_signal(15)  # SIGTERM, as Kubernetes sends it
            assert first.process.wait(30) == 0, first.log()
            wait_for(lambda: served >= stopped_at + 40, 60, what="the survivor to carry the load")
            stop.set()
            for future in running:
                future.result()

    assert failures == []
    assert served > stopped_at > 0
    # nginx did meet the stopped replica, and moved those calls to the other one.
    first_address = first.address
    assert f'upstream: "grpc://{first_address}' in (cluster["nginx_root"] / "error.log").read_text()
    # The survivor carried the load after the stop.
    assert calls_served(second) > before
