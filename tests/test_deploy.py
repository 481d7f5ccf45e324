"""The Dockerfile and the manifests, validated as far as the tools here allow (no Docker engine, no cluster).

hadolint lints the Dockerfile; kubernetes-validate checks every Kubernetes manifest
against the API's own schemas, strictly, for the oldest and newest versions we
support; the Istio resources (whose schemas are CRDs) and the wiring between all of
them are checked here: labels, ports, probes, timings, and that every setting the
manifests pass is one the server accepts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml
from contextfold import Client
from contextfold_server.config import parse_config

from harness.servers import Postgres, start_server

from .pages import printed

ROOT = Path(__file__).resolve().parent.parent
# What `kubectl apply -f deploy/kubernetes/` applies (it does not descend into folders), and the examples beside it.
KUBERNETES = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "deploy" / "kubernetes" / "examples").glob("*.yaml"))
BIN = Path(sys.executable).parent


def documents(path: Path) -> list[dict]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def resources() -> dict[str, dict]:
    found = {}
    for path in [*KUBERNETES, *(ROOT / "deploy" / "istio").glob("*.yaml")]:
        for document in documents(path):
            found[document["kind"]] = document
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    lint = subprocess.run([BIN / "hadolint", "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
def test_the_kubernetes_manifests_match_the_api_schemas(version: str) -> None:
    check = subprocess.run(
        [BIN / "kubernetes-validate", "--strict", "--quiet", "-k", version, *map(str, KUBERNETES + EXAMPLES)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_applying_the_directory_never_overwrites_the_database_secret() -> None:
    """The Deployment reads the `contextfold-database` secret; the directory `kubectl apply -f` is
    given holds no Secret (the example's `CHANGE-ME` would replace the operator's real one)."""
    kinds = {path.name: [document["kind"] for document in documents(path)] for path in KUBERNETES}
    assert not [name for name, found in kinds.items() if "Secret" in found], kinds
    container = resources()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    secrets = {item["valueFrom"]["secretKeyRef"]["name"] for item in container["env"] if "valueFrom" in item}
    example = [document for path in EXAMPLES for document in documents(path) if document["kind"] == "Secret"]
    assert secrets == {"contextfold-database"} == {document["metadata"]["name"] for document in example}


def test_keys_in_a_container_run_as_printed_as_the_schema_owner(tmp_path: Path, fresh_postgres: Postgres) -> None:
    """The deploy page's `docker run … keys create` line, run as the image runs it (its entry point and
    its environment; there is no Docker engine here) in the two-role setup: the pod's database URL is
    a role that owns nothing (which may not touch the keys), the line gives the owner's; the key it
    prints opens the service."""
    with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
        conn.execute("CREATE ROLE contextfold_app LOGIN")
    serving_url = fresh_postgres.url.replace("postgresql://postgres:@", "postgresql://contextfold_app:@")
    words = shlex.split(printed("docs/deploy.md", "docker run --rm --entrypoint").replace("\\\n", " "))
    assert words[:3] == ["docker", "run", "--rm"]
    env = {name: value for name, value in os.environ.items() if not name.startswith("CONTEXTFOLD_")}
    # As the Deployment sets it: the requests' role.
    env["CONTEXTFOLD_DATABASE_URL"] = serving_url
    rest, entrypoint = words[3:], None
    while rest[0].startswith("-"):
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--entrypoint":
            entrypoint = value
        else:
            assert flag == "-e", flag
            name, _, printed_url = value.partition("=")
            assert name == "CONTEXTFOLD_DATABASE_MIGRATION_URL" and printed_url.startswith("postgresql://")
            env[name] = fresh_postgres.url
    image, arguments = rest[0], rest[1:]
    assert entrypoint == "contextfold" and image.startswith("contextfold:")
    server = start_server(
        tmp_path / "server.log", "--database-url", serving_url, "--database-migration-url", fresh_postgres.url
    )
    try:
        # Without the owner's URL, the requests' role is refused, and the command says what it needs.
        refused = subprocess.run(
            [BIN / entrypoint, *arguments],
            cwd=tmp_path,
            env={name: value for name, value in env.items() if name != "CONTEXTFOLD_DATABASE_MIGRATION_URL"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert "schema owner" in refused.stderr and "CONTEXTFOLD_DATABASE_MIGRATION_URL" in refused.stderr
        done = subprocess.run(
            [BIN / entrypoint, *arguments], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        created = json.loads(done.stdout)
        assert (created["namespace"], created["role"]) == ("acme", "admin")
        with Client(server.address, api_key=created["key"], timeout=30) as cf:
            cf.create_store("notes")
            assert [store.name for store in cf.list_stores()] == ["notes"]
    finally:
        assert server.stop() == 0, server.log()


def test_the_image_and_the_deployment_configure_a_server_that_starts(monkeypatch) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["contextfold", "serve"]' in dockerfile
    assert "USER 10001" in dockerfile
    image_env = dict(
        pair.split("=", 1)
        for line in dockerfile.split("ENV ", 1)[1].split("\n\n", 1)[0].splitlines()
        for pair in shlex.split(line.rstrip("\\"))
    )
    container = resources()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    # A value a Secret gives stands in as a URL of its shape (the server refuses one libpq cannot read).
    from_secret = "postgresql://contextfold@database.from-secret:5432/contextfold"
    env = {**image_env, **{item["name"]: item.get("value", from_secret) for item in container["env"]}}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = parse_config([])
    assert (config.host, config.port, config.admin_host, config.admin_port) == ("0.0.0.0", 50051, "0.0.0.0", 9464)
    assert config.grace_seconds == 20
    assert config.workers == int(float(container["resources"]["requests"]["cpu"])), "a worker per core requested"
    assert config.log_format == "json"
    assert config.database_url == from_secret


def test_probes_ports_and_shutdown_timing_fit_together() -> None:
    found = resources()
    pod = found["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9464}
    assert container["readinessProbe"]["grpc"]["port"] == ports["grpc"]
    assert container["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    grace = next(int(item["value"]) for item in container["env"] if item["name"] == "CONTEXTFOLD_GRACE_SECONDS")
    assert pod["terminationGracePeriodSeconds"] > pre_stop + grace

    service = found["Service"]["spec"]
    labels = found["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"] == labels == found["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    grpc_port = next(port for port in service["ports"] if port["name"] == "grpc")
    assert (grpc_port["appProtocol"], grpc_port["targetPort"]) == ("grpc", "grpc")
    autoscaler = found["HorizontalPodAutoscaler"]["spec"]
    assert autoscaler["scaleTargetRef"]["name"] == found["Deployment"]["metadata"]["name"]
    assert autoscaler["minReplicas"] > found["PodDisruptionBudget"]["spec"]["minAvailable"]


def test_the_istio_example_targets_the_workload() -> None:
    found = resources()
    labels = found["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service = found["Service"]["metadata"]["name"]
    for kind in ("PeerAuthentication", "AuthorizationPolicy"):
        assert found[kind]["spec"]["selector"]["matchLabels"] == labels
    assert found["PeerAuthentication"]["spec"]["mtls"]["mode"] == "STRICT"
    assert found["DestinationRule"]["spec"]["host"] == service
    route = found["VirtualService"]["spec"]["http"][0]
    assert found["VirtualService"]["spec"]["hosts"] == [service]
    assert route["route"][0]["destination"]["port"]["number"] == 50051
    # Istio's gRPC retry conditions; each must be one it knows.
    known = {"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
    known |= {"5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "refused-stream"}
    assert set(route["retries"]["retryOn"].split(",")) <= known
    for document in documents(ROOT / "deploy" / "istio" / "contextfold.yaml"):
        assert document["apiVersion"] in ("security.istio.io/v1", "networking.istio.io/v1")


def envoy_validates(config: dict | str, tmp_path: Path) -> None:
    """Envoy itself checks a configuration (`--mode validate`: every field, type and reference)."""
    from harness.envoy import envoy_binary

    path = tmp_path / "envoy.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    done = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_standalone_envoy_configuration_is_valid_and_fails_open(tmp_path: Path) -> None:
    text = (ROOT / "deploy" / "envoy" / "envoy.yaml").read_text()
    envoy_validates(text, tmp_path)
    manager = yaml.safe_load(text)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    processor = manager["typed_config"]["http_filters"][0]["typed_config"]
    assert processor["failure_mode_allow"] is True
    assert processor["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert processor["processing_mode"]["response_body_mode"] == "NONE"


def test_the_istio_processor_filter_is_one_envoy_accepts(tmp_path: Path) -> None:
    """The EnvoyFilter's patch, placed in a listener of Envoy's own, with a cluster of the name it points at."""
    (patch,) = [
        p["patch"]["value"]
        for p in documents(ROOT / "deploy" / "istio" / "mesh-processor.yaml")[0]["spec"]["configPatches"]
    ]
    cluster = patch["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    assert cluster == "outbound|50051||contextfold.contextfold.svc.cluster.local"
    standalone = yaml.safe_load((ROOT / "deploy" / "envoy" / "envoy.yaml").read_text())
    manager = standalone["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    manager["http_filters"][0] = patch
    standalone["static_resources"]["clusters"][0]["name"] = cluster
    standalone["static_resources"]["clusters"][0]["load_assignment"]["cluster_name"] = cluster
    envoy_validates(standalone, tmp_path)
    assert patch["typed_config"]["failure_mode_allow"] is True


def test_the_envoy_gateway_policy_sends_bodies_to_contextfold_and_fails_open() -> None:
    policy, grant = documents(ROOT / "deploy" / "envoy-gateway" / "extension-policy.yaml")
    assert policy["kind"] == "EnvoyExtensionPolicy" and grant["kind"] == "ReferenceGrant"
    (processor,) = policy["spec"]["extProc"]
    service = documents(ROOT / "deploy" / "kubernetes" / "service.yaml")[0]
    ports = {port["port"] for port in service["spec"]["ports"]}
    assert processor["backendRefs"][0]["name"] == service["metadata"]["name"]
    assert processor["backendRefs"][0]["port"] in ports
    assert processor["failOpen"] is True and processor["processingMode"]["request"]["body"] == "Buffered"
    assert grant["spec"]["to"][0]["name"] == service["metadata"]["name"]


CLOUDNATIVE_PG = ROOT / "deploy" / "cloudnative-pg"


def _json_patched(document: dict, operations: list[dict]) -> dict:
    """`document` with `operations` applied as `kubectl patch --type json` applies them (the `test`,
    `replace` and `add` of RFC 6902, which the example uses)."""
    patched = json.loads(json.dumps(document))
    for operation in operations:
        *parents, last = operation["path"].lstrip("/").split("/")
        holder = patched
        for key in parents:
            holder = holder[int(key)] if isinstance(holder, list) else holder[key]
        key = int(last) if isinstance(holder, list) else last
        if operation["op"] == "test":
            assert holder[key] == operation["value"], f"the patch's test failed: {operation['path']}"
        elif operation["op"] == "replace":
            holder[key] = operation["value"]
        elif operation["op"] == "add" and isinstance(holder, list):
            holder.insert(key, operation["value"])
        else:
            holder[key] = operation["value"]
    return patched


def _expanded(value: str, defined: dict[str, str]) -> str:
    """A variable's value with `$(NAME)` replaced as Kubernetes does: only by variables defined before it."""
    for name in re.findall(r"\$\(([A-Z_]+)\)", value):
        assert name in defined, f"$({name}) is used before it is defined"
        value = value.replace(f"$({name})", defined[name])
    return value


def test_the_cloudnative_pg_example_points_the_deployment_at_the_clusters_own_services(
    tmp_path: Path, monkeypatch
) -> None:
    """The Cluster: two instances, synchronous, pgvector made in the application database. The
    Deployment, patched as the example says, still passes the API's schemas, reads its user and
    password from the Secret the operator makes for that database, and writes to the Cluster's `-rw`
    service, reads from its `-ro` one; the server takes the URLs it is given."""
    (cluster,) = documents(CLOUDNATIVE_PG / "cluster.yaml")
    assert (cluster["apiVersion"], cluster["kind"]) == ("postgresql.cnpg.io/v1", "Cluster")
    spec = cluster["spec"]
    assert spec["instances"] == 2
    assert spec["postgresql"]["synchronous"]["number"] >= 1
    assert spec["postgresql"]["synchronous"]["dataDurability"] == "required"
    assert "CREATE EXTENSION IF NOT EXISTS vector" in spec["bootstrap"]["initdb"]["postInitApplicationSQL"]
    name, database = cluster["metadata"]["name"], spec["bootstrap"]["initdb"]["database"]

    operations = yaml.safe_load((CLOUDNATIVE_PG / "deployment-patch.yaml").read_text())
    deployment = _json_patched(resources()["Deployment"], operations)
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(deployment))
    check = subprocess.run(
        [BIN / "kubernetes-validate", "--strict", "--quiet", "-k", "1.37.0", str(path)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr

    container = deployment["spec"]["template"]["spec"]["containers"][0]
    secrets = {item["valueFrom"]["secretKeyRef"]["name"] for item in container["env"] if "valueFrom" in item}
    assert secrets == {f"{name}-app"}
    defined: dict[str, str] = {}
    for item in container["env"]:
        given = {"username": "contextfold", "password": "s3cretLettersAnd0"}
        defined[item["name"]] = (
            given[item["valueFrom"]["secretKeyRef"]["key"]]
            if "valueFrom" in item
            else _expanded(item["value"], defined)
        )
    primary = psycopg.conninfo.conninfo_to_dict(defined["CONTEXTFOLD_DATABASE_URL"])
    replica = psycopg.conninfo.conninfo_to_dict(defined["CONTEXTFOLD_DATABASE_READ_URL"])
    assert (primary["host"], replica["host"]) == (f"{name}-rw", f"{name}-ro")
    assert primary["dbname"] == replica["dbname"] == database
    assert primary["user"] == "contextfold" and primary["password"] == "s3cretLettersAnd0"
    for variable, value in defined.items():
        monkeypatch.setenv(variable, value)
    config = parse_config([])
    assert config.database_url == defined["CONTEXTFOLD_DATABASE_URL"]
    assert list(config.database_read_urls) == [defined["CONTEXTFOLD_DATABASE_READ_URL"]]
