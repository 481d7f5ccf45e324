"""What every deployment relies on: health, reflection, graceful stop, and data that survives a restart."""

from __future__ import annotations

import grpc
import pytest
from contextfold import Client
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from harness.messages import user
from harness.servers import start_server


def test_health_reports_serving_for_the_server_and_each_service(server) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "contextfold.v1.InjectionService", "contextfold.v1.MemoryService"):
            assert (
                stub.Check(health_pb2.HealthCheckRequest(service=service)).status
                == health_pb2.HealthCheckResponse.SERVING
            )


def test_health_can_be_watched(server) -> None:
    """Watch, as some balancers and meshes ask for health: the status at once, then as it changes."""
    with grpc.insecure_channel(server.address) as channel:
        watching = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=10)
        assert next(watching).status == health_pb2.HealthCheckResponse.SERVING
        watching.cancel()


def test_reflection_lists_the_services(server) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        (response,) = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {service.name for service in response.list_services_response.service}
    assert {"contextfold.v1.InjectionService", "contextfold.v1.MemoryService", "grpc.health.v1.Health"} <= names


def test_the_embedded_database_survives_a_restart_and_migrations_rerun_cleanly(tmp_path) -> None:
    data_dir = tmp_path / "pgdata"
    first = start_server(tmp_path / "first.log", "--data-dir", str(data_dir))
    try:
        with Client(first.address) as cf:
            cf.create_store("kept")
            cf.add_memories("kept", [{"id": "k1", "content": "The user's boat is called Tern"}])
    finally:
        assert first.stop() == 0, first.log()

    second = start_server(tmp_path / "second.log", "--data-dir", str(data_dir))
    try:
        with Client(second.address) as cf:
            assert cf.get_memory("k1").content == "The user's boat is called Tern"
            result = cf.inject([user("What is my boat called?")], stores=["kept"])
            assert result.report.entries[0].id == "k1"
    finally:
        assert second.stop() == 0, second.log()


def test_health_and_reflection_refuse_what_does_not_decode_as_invalid_argument(server) -> None:
    with grpc.insecure_channel(server.address) as channel:
        for method in ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"):
            with pytest.raises(grpc.RpcError) as raised:
                if method.endswith("Check"):
                    channel.unary_unary(method)(b"\xff\xff\xff\x01not a message", timeout=10)
                else:
                    list(channel.unary_stream(method)(b"\xff\xff\xff\x01not a message", timeout=10))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "Error" not in raised.value.details().split(":")[0], "no Python class name"
        reflection = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        with pytest.raises(grpc.RpcError) as raised:
            list(reflection(iter([b"\xff\xff\xff\x01"]), timeout=10))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # And what does decode is served as before.
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
