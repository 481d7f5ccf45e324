"""The local model on ONNX Runtime: the vectors sentence-transformers computes, with no PyTorch at run time;
and micro-batched embeddings: concurrent texts share model calls, each gets its own vector."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from contextfold_server.embedding.batching import BatchingEmbedder, BatchPolicy, Lane
from contextfold_server.embedding.local import LocalEmbedder, exported_model, packaged_weights

# Short and long, plain and not: what the model meets in memories and questions.
TEST_SET = [
    "User prefers dark mode",
    "Which theme do I like?",
    "The user's cat is called Miso",
    "What is my cat called?",
    "",
    "   ",
    "héllo wörld — ünïcode ✓ 日本語のテキスト",
    "Error E1042: connection reset by peer at 03:14 UTC (incident INC-2291)",
    "SELECT * FROM memories WHERE user_id = 'ada';",
    "The quarterly report is due on the first Monday of March. " * 40,
    "x" * 5000,
    *[f"The user's note number {n}: likes green tea and long walks" for n in range(8)],
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LocalEmbedder:
    return LocalEmbedder(exported_model(tmp_path_factory.mktemp("models")), threads=2)


def test_the_onnx_model_gives_the_vectors_sentence_transformers_gives(model: LocalEmbedder) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(packaged_weights()), device="cpu").encode(TEST_SET, normalize_embeddings=True)
    vectors = np.array(model.encode(TEST_SET))
    cosines = (vectors * reference).sum(axis=1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosines.min() >= 0.9999, dict(zip(TEST_SET, cosines, strict=True))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # A batch pads its texts; each one's vector is the same as alone.
    assert np.allclose(vectors[1], model.encode([TEST_SET[1]])[0], atol=1e-5)


def test_the_export_is_built_once_and_reused(tmp_path: Path) -> None:
    first = exported_model(tmp_path)
    built = first.stat().st_mtime_ns
    assert exported_model(tmp_path) == first and first.stat().st_mtime_ns == built
    assert [path.name for path in tmp_path.iterdir()] == [first.name], "no partial file is left behind"


def test_the_server_embeds_without_pytorch(tmp_path: Path) -> None:
    probe = (
        "import sys, pathlib; from contextfold_server.embedding.local import LocalEmbedder, exported_model; "
        f"m = LocalEmbedder(exported_model(pathlib.Path({str(tmp_path)!r}))); m.encode(['hello']); "
        "print(sorted({'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_concurrent_texts_share_model_calls_and_get_their_own_vectors(model: LocalEmbedder) -> None:
    async def run() -> None:
        batching = BatchingEmbedder(model)
        texts = TEST_SET[-8:] + [f"Another note, number {n}" for n in range(16)]

        together = await asyncio.gather(*(batching.embed([text]) for text in texts))
        alone = [await model.embed([text]) for text in texts]

        # Texts that arrive while the model is busy (or before it starts) go in together.
        assert batching.model_calls <= 2
        assert np.allclose(np.array(together), np.array(alone), atol=1e-4)

        # A text seen before is not embedded again; the vector is the same.
        calls = batching.model_calls
        again = await batching.embed([texts[3], "a text never seen"])
        assert batching.model_calls == calls + 1
        assert batching.cache_hits == 1
        assert again[0] == together[3][0]

    asyncio.run(run())


def test_another_tenant_s_text_is_tokenized_after_a_turn_of_long_batches_not_after_them(model: LocalEmbedder) -> None:
    """One tenant's twelve batches of long texts are counted at once (adds of entries of 16,000 characters); another
    tenant's question, counted after them, waits for a turn of one of them on the worker's thread, not for the
    batches. asyncio's threads counted them first come first, six at once."""
    batch = [f"Entry {n}: " + "The user described the release plan at length, with its risks. " * 250 for n in range(8)]

    async def scenario() -> tuple[float, float]:
        started = time.perf_counter()
        heavy = [asyncio.ensure_future(model.token_counts(batch, "heavy")) for _ in range(12)]
        await asyncio.sleep(0.02)
        asked = time.perf_counter()
        question = "What did we decide about the release, and who signed it off? " * 20
        assert await model.token_counts([question], "other") == [len(model.tokenize([question])[0])]
        waited = time.perf_counter() - asked
        assert all(counts == [256] * 8 for counts in await asyncio.gather(*heavy))
        return waited, time.perf_counter() - started

    waited, all_of_them = asyncio.run(scenario())
    assert waited < all_of_them / 5, f"waited {waited:.3f} s of the long batches' {all_of_them:.3f} s"


class RecordingModel:
    """A stand-in for the model: a text's tokens are its words, a batch takes a while, and each batch it was
    given is recorded."""

    name, dimension = "recording", 2

    def __init__(self, fails_first: bool = False, batches_at_once: int = 1) -> None:
        self.batches: list[list[str]] = []
        self._fails = fails_first
        self.batches_at_once = batches_at_once
        self.running = self.most_running = 0

    async def token_counts(self, texts: list[str], tenant: str = "") -> list[int]:
        return [len(text.split()) or 1 for text in texts]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(0.02)
        self.running -= 1
        if self._fails:
            self._fails = False
            raise ConnectionError("the embedding service went away")
        return [[float(len(text)), 1.0] for text in texts]

    async def close(self) -> None:
        pass


def words(count: int, tag: str) -> str:
    return " ".join([tag, *(["word"] * (count - 1))])


def test_a_failing_model_fails_every_caller_in_the_batch_and_the_next_batch_works() -> None:
    async def run() -> None:
        batching = BatchingEmbedder(RecordingModel(fails_first=True))
        outcomes = await asyncio.gather(*(batching.embed([f"t{n}"]) for n in range(5)), return_exceptions=True)
        assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
        assert await batching.embed(["t1", "t22"]) == [[2.0, 1.0], [3.0, 1.0]]

    asyncio.run(run())


def test_a_tenants_flood_does_not_delay_another_tenants_query() -> None:
    async def run() -> None:
        model = RecordingModel()
        batching = BatchingEmbedder(model, Lane.BULK)
        busy = asyncio.ensure_future(batching.embed(["first"], tenant="flooding"))
        await asyncio.sleep(0)
        flood = asyncio.ensure_future(batching.embed([f"bulk {n}" for n in range(500)], tenant="flooding"))
        await asyncio.sleep(0)
        query = await batching.embed(["what do I drink?"], tenant="bystander")
        assert query == [[16.0, 1.0]]
        # The query went in the batch after the one running when it came, not after the flood's.
        assert "what do I drink?" in model.batches[1]
        assert len(await flood) == 500 and await busy == [[5.0, 1.0]]

    asyncio.run(run())


def test_a_batch_holds_no_more_tokens_than_its_lane_allows_once_padded() -> None:
    async def run() -> None:
        model = RecordingModel()
        batching = BatchingEmbedder(model, Lane.BULK)
        running = asyncio.ensure_future(batching.embed(["running"], tenant="a"))
        await asyncio.sleep(0)
        texts = [words(256, f"long{n}") for n in range(6)] + [words(16, f"short{n}") for n in range(64)]
        await asyncio.gather(running, batching.embed(texts, tenant="a"))
        budget = Lane.BULK.value
        for batch in model.batches[1:]:
            counts = [len(text.split()) for text in batch]
            assert len(batch) <= budget.max_texts and max(counts) * len(batch) <= budget.max_tokens, counts
        # The long texts went two at a time (512 tokens), the short ones 32 at a time, never mixed.
        sizes = sorted(len(batch) for batch in model.batches[1:])
        assert sizes == [2, 2, 2, 32, 32], sizes
        assert all(len({len(text.split()) for text in batch}) == 1 for batch in model.batches[1:])

    asyncio.run(run())


def test_texts_are_batched_with_others_of_like_length_in_turns_per_tenant() -> None:
    async def run() -> None:
        model = RecordingModel()
        batching = BatchingEmbedder(model, Lane.QUERIES)
        running = asyncio.ensure_future(batching.embed(["running"], tenant="a"))
        await asyncio.sleep(0)
        # Two tenants, each with long and short texts interleaved.
        mixed = {tenant: [words(128 if n % 2 else 8, f"{tenant}{n}") for n in range(8)] for tenant in ("a", "b")}
        await asyncio.gather(running, *(batching.embed(texts, tenant=tenant) for tenant, texts in mixed.items()))
        batches = model.batches[1:]
        for batch in batches:
            assert len({len(text.split()) for text in batch}) == 1, batch
        # Each batch of short texts holds both tenants' in turns, not one tenant's first.
        short = [batch for batch in batches if len(batch[0].split()) == 8]
        assert {text[0] for text in short[0]} == {"a", "b"}

    asyncio.run(run())


def test_a_model_that_runs_batches_side_by_side_is_given_that_many_and_no_more() -> None:
    async def run() -> None:
        model = RecordingModel(batches_at_once=2)
        batching = BatchingEmbedder(model, Lane.BULK)
        texts = [words(256, f"long{n}") for n in range(12)]
        vectors = await asyncio.gather(*(batching.embed([text], tenant=f"t{n % 3}") for n, text in enumerate(texts)))
        assert vectors == [[[float(len(text)), 1.0]] for text in texts]
        # Two batches ran at once, never three; every batch within the lane's tokens.
        assert model.most_running == 2
        assert all(len(batch) <= 2 for batch in model.batches)
        assert sum(map(len, model.batches)) == 12

    asyncio.run(run())


def test_a_tenant_past_its_queue_is_refused_and_the_others_are_not() -> None:
    from contextfold_server.errors import ResourceExhausted

    async def run() -> None:
        batching = BatchingEmbedder(RecordingModel(), max_queued_per_tenant=100)
        held = asyncio.ensure_future(batching.embed([f"held {n}" for n in range(90)], tenant="flooding"))
        await asyncio.sleep(0)
        with pytest.raises(ResourceExhausted) as refused:
            await batching.embed([f"more {n}" for n in range(20)], tenant="flooding")
        assert refused.value.reason == "EMBEDDING_QUEUE_FULL" and refused.value.subject == "namespace:flooding"
        assert await batching.embed(["a query"], tenant="bystander") == [[7.0, 1.0]]
        assert len(await held) == 90

    asyncio.run(run())


def test_texts_nobody_waits_for_leave_the_queue() -> None:
    async def run() -> None:
        model = RecordingModel()
        batching = BatchingEmbedder(model, Lane.QUERIES, policy=BatchPolicy(max_tokens=256, max_texts=8))
        running = asyncio.ensure_future(batching.embed(["running"], tenant="a"))
        await asyncio.sleep(0)
        abandoned = asyncio.ensure_future(batching.embed([f"abandoned {n}" for n in range(40)], tenant="a"))
        await asyncio.sleep(0)
        abandoned.cancel()
        await asyncio.gather(abandoned, return_exceptions=True)
        assert await batching.embed(["after"], tenant="b") == [[5.0, 1.0]]
        await running
        embedded = [text for batch in model.batches for text in batch]
        assert not any(text.startswith("abandoned") for text in embedded), model.batches

    asyncio.run(run())
