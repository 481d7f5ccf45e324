"""Micro-batched embeddings with the real model: concurrent texts share model calls, each gets its own vector."""

from __future__ import annotations

import asyncio

import numpy as np
from contextfold_server.embedding.batching import BatchingEmbedder
from contextfold_server.embedding.local import LocalEmbedder


def test_concurrent_texts_share_model_calls_and_get_their_own_vectors() -> None:
    async def run() -> None:
        model = LocalEmbedder()
        batching = BatchingEmbedder(model)
        texts = [f"The user's note number {n}: likes green tea and long walks" for n in range(24)]

        together = await asyncio.gather(*(batching.embed([text]) for text in texts))
        alone = [await model.embed([text]) for text in texts]
        # The model's vectors are sentence-transformers' own.
        reference = model._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        assert np.allclose(np.array(alone)[:, 0, :], reference, atol=1e-5)

        # Texts that arrive while the model is busy (or before it starts) go in together.
        assert batching.model_calls <= 2
        assert np.allclose(np.array(together), np.array(alone), atol=1e-4)

        # A text seen before is not embedded again; the vector is the same.
        calls = batching.model_calls
        again = await batching.embed([texts[3], "a text never seen"])
        assert batching.model_calls == calls + 1
        assert batching.cache_hits == 1
        assert again[0] == together[3][0]
        await batching.close()

    asyncio.run(run())


def test_a_failing_model_fails_every_caller_in_the_batch_and_the_next_batch_works() -> None:
    class Flaky:
        name, dimension = "flaky", 2

        def __init__(self) -> None:
            self.calls = 0

        async def embed(self, texts: list[str]) -> list[list[float]]:
            self.calls += 1
            await asyncio.sleep(0.01)
            if self.calls == 1:
                raise ConnectionError("the embedding service went away")
            return [[float(len(text)), 1.0] for text in texts]

        async def close(self) -> None:
            pass

    async def run() -> None:
        batching = BatchingEmbedder(Flaky())
        outcomes = await asyncio.gather(*(batching.embed([f"t{n}"]) for n in range(5)), return_exceptions=True)
        assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
        assert await batching.embed(["t1", "t22"]) == [[2.0, 1.0], [3.0, 1.0]]

    asyncio.run(run())
