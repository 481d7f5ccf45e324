"""Shared fixtures: one real server (embedded Postgres, local model) for the session, and helpers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest
from contextfold import Client, NotFound

from .servers import ServerProcess, serving


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("server")) as process:
        yield process


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.address, timeout=30) as cf:
        yield cf


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_store(client: Client) -> Iterator[Callable[..., str]]:
    """Create stores with unique names for one test; they are deleted after it."""
    created: list[str] = []

    def make(prefix: str = "store", name: str | None = None, **options) -> str:
        store = name or unique(prefix)
        client.create_store(store, **options)
        created.append(store)
        return store

    yield make
    for store in created:
        with contextlib.suppress(NotFound):
            client.delete_store(store, force=True)


def user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"text": text}]}
