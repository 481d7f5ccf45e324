"""The asyncio client: the same calls, awaited, with the same errors."""

from __future__ import annotations

import asyncio

import pytest
from contextfold import AsyncClient, InvalidArgument, NotFound

from harness.messages import unique, user


def test_the_async_client_manages_memory_and_injects(server) -> None:
    async def scenario() -> None:
        store = unique("async")
        async with AsyncClient(server.address, timeout=30) as cf:
            await cf.create_store(store)
            (added,) = await cf.add_memories(store, [{"content": "The user's kayak is yellow", "user_id": "ada"}])
            result = await cf.inject([user("What colour is my kayak?")], stores=[store], scope={"user_id": "ada"})
            assert result.injected and [e.id for e in result.report.entries] == [added.id]
            assert [m.id async for m in cf.list_memories(store)] == [added.id]
            assert store in [s.name async for s in cf.list_stores()]
            with pytest.raises(InvalidArgument) as raised:
                await cf.inject([user("x")], max_entries=-1)
            assert raised.value.field_violations[0][0] == "memory.max_entries"
            assert await cf.delete_memories([added.id]) == 1
            with pytest.raises(NotFound):
                await cf.get_memory(added.id)
            assert await cf.delete_store(store) == 0

    asyncio.run(scenario())
