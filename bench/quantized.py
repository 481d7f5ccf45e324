"""The server's model quantized to int8, against the model as it ships: speed, vectors, recall.

The int8 graph is ONNX Runtime's own dynamic quantization (`quantize_dynamic`, int8 weights, the
MatMuls quantized, activations scaled per call) of the graph the server builds (`minilm_graph.py`),
put where a server looks for its model (`--model-dir`, under the export's own name), so a server
started on that folder embeds with it and nothing else changes. Two graphs: the weights scaled per
tensor, and per channel (each output column of a weight its own scale: closer vectors, as fast).
Printed, in one run:

- the embedding of one question, p50, and of a batch of 32 turns, each model in turns with the others;
- how far each int8 model's vectors are from the float ones (cosine of each text's two vectors);
- with `--recall`: bench/locomo.py and bench/retrieval.py run once on the float model and once on one
  int8 model (per channel; per tensor with `--per-tensor`), a server of their own each, recall@5 of
  the default and of similarity side by side, cross-validated where they print it (about 30 minutes).

The rule for adopting it (issue 43): recall on every set within 0.01 of the float model's.

    .venv/bin/python -m bench.quantized
    .venv/bin/python -m bench.quantized --recall
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from contextfold_server.embedding.local import LocalEmbedder, exported_model

from bench import RESULTS, locomo
from bench.corpus import CACHE
from bench.retrieval import SET_NAMES

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = 200
BATCH = 32
WANTED = 0.01  # the recall the int8 model may lose, on every set


def quantized(model: Path, folder: Path, per_channel: bool) -> Path:
    """The int8 graph of `model` (its weights scaled `per_channel` or per tensor), under the export's own name in
    `folder` (where a server looks for it)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.name
    quantize_dynamic(
        str(model), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"], per_channel=per_channel
    )
    return target


def texts() -> tuple[list[str], list[str]]:
    """Questions and turns to embed: LoCoMo's development split where it lies, else sentences of our own."""
    if locomo.DEFAULT_DATA.exists():
        talks = locomo.conversations(locomo.DEFAULT_DATA)
        questions = [q.text for talk in talks for q in talk.questions][:QUESTIONS]
        turns = [turn.content() for talk in talks for turn in talk.turns][: BATCH * 8]
        return questions, turns
    from bench import corpus

    facts = corpus.facts(BATCH * 8)
    return [f"What do you know about {fact.split()[0]}?" for fact in facts][:QUESTIONS], facts


def speed(models: dict[str, LocalEmbedder], questions: list[str], turns: list[str]) -> dict[str, dict[str, float]]:
    """Each model's p50 for one question and for a batch of `BATCH` turns, the models taking turns."""
    one: dict[str, list[float]] = {name: [] for name in models}
    batch: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        model.encode(questions[:4])
    for question in questions:
        for name, model in models.items():
            started = time.perf_counter()
            model.encode([question])
            one[name].append((time.perf_counter() - started) * 1000)
    for start in range(0, len(turns), BATCH):
        for name, model in models.items():
            started = time.perf_counter()
            model.encode(turns[start : start + BATCH])
            batch[name].append((time.perf_counter() - started) * 1000)
    return {
        name: {"question_p50_ms": statistics.median(one[name]), "batch_p50_ms": statistics.median(batch[name])}
        for name in models
    }


def closeness(float_model: LocalEmbedder, int8_model: LocalEmbedder, texts: list[str]) -> dict[str, float]:
    """The cosine of each text's float and int8 vectors: the least and the mean."""
    a = np.asarray(float_model.encode(texts), dtype=np.float32)
    b = np.asarray(int8_model.encode(texts), dtype=np.float32)
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"least": float(cosines.min()), "mean": float(cosines.mean())}


def recall(model_dir: Path | None, scratch: Path, name: str) -> dict[str, float]:
    """bench/locomo.py and bench/retrieval.py on the model in `model_dir` (None: the server's own), the
    figures they print: recall@5 in-sample and cross-validated."""
    env = {**os.environ, **({"CONTEXTFOLD_MODEL_DIR": str(model_dir)} if model_dir else {})}
    figures: dict[str, float] = {}
    for module, args in (("bench.locomo", ["--rankings", "default", "similarity"]), ("bench.retrieval", [])):
        out = scratch / f"{module}-{name}.json"
        done = subprocess.run(
            [sys.executable, "-m", module, *args, "--json", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{module} on the {name} model failed ({done.returncode}):\n{done.stderr[-3000:]}")
        print(done.stdout, flush=True)
        figures |= _figures(module, done.stdout, json.loads(out.read_text()))
    return figures


def _figures(module: str, printed: str, rows: object) -> dict[str, float]:
    if module == "bench.locomo":
        assert isinstance(rows, list)
        found = {f"locomo {r['ranking']}": r["recall@5"] for r in rows if r["category"] == "all"}
        for kind in ("with", "without"):
            crossed = re.search(rf"{kind} session ids: recall@5 ([\d.]+) cross-validated", printed)
            if crossed:
                found[f"locomo default cross-validated, {kind} session ids"] = float(crossed[1])
        return found
    crossed = re.search(r"mean recall@5 ([\d.]+) cross-validated", printed)
    assert isinstance(rows, dict)
    quality = rows["quality"]
    found = {
        f"own sets {ranking}": statistics.mean(per_set[name]["recall@5"] for name in SET_NAMES)
        for ranking, per_set in quality.items()
        if ranking in ("similarity", "store_aware")
    }
    for name in SET_NAMES:
        found[f"own set {name}, similarity"] = quality["similarity"][name]["recall@5"]
    if crossed:
        found["own sets default cross-validated"] = float(crossed[1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recall", action="store_true", help="run bench/locomo.py and bench/retrieval.py on each")
    parser.add_argument("--per-tensor", action="store_true", help="measure the recall of the graph scaled per tensor")
    parser.add_argument("--json", type=Path, default=RESULTS / "quantized.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        float_path = exported_model(CACHE / "models")
        graphs = {"int8 per tensor": False, "int8 per channel": True}
        paths = {
            name: quantized(float_path, folder / name.replace(" ", "-"), channel) for name, channel in graphs.items()
        }
        models = {"float": LocalEmbedder(float_path)} | {name: LocalEmbedder(path) for name, path in paths.items()}
        questions, turns = texts()
        timed = speed(models, questions, turns)
        results: dict[str, object] = {"speed": timed, "cosine": {}}
        print(f"model file: float {float_path.stat().st_size / 1e6:.0f} MB")
        for name, row in timed.items():
            one, batch = row["question_p50_ms"], row["batch_p50_ms"]
            print(f"{name:16} one question p50 {one:.2f} ms, {BATCH} turns p50 {batch:.1f} ms")
        for name, path in paths.items():
            near = closeness(models["float"], models[name], questions + turns)
            results["cosine"][name] = near  # type: ignore[index]
            ratio = timed[name]["question_p50_ms"] / timed["float"]["question_p50_ms"]
            print(
                f"{name} / float: one question {ratio:.2f}x, file {path.stat().st_size / 1e6:.0f} MB; cosine of a"
                f" text's two vectors: least {near['least']:.4f}, mean {near['mean']:.4f}"
            )
        if args.recall:
            chosen = "int8 per tensor" if args.per_tensor else "int8 per channel"
            side = {"float": recall(None, folder, "float"), chosen: recall(paths[chosen].parent, folder, "int8")}
            print(f"\n{'recall@5':52} {'float':>7} {'int8':>7} {'change':>7}   ({chosen})")
            for figure in side["float"]:
                a, b = side["float"][figure], side[chosen].get(figure, float("nan"))
                print(f"{figure:52} {a:>7.3f} {b:>7.3f} {b - a:>+7.3f}")
            worst = min(side[chosen][f] - side["float"][f] for f in side["float"] if f in side[chosen])
            verdict = "holds: adopt" if worst >= -WANTED else "does not hold: keep the float model"
            print(f"rule: recall within {WANTED} on every set; the largest loss {-worst:.3f}, {verdict}")
            results["recall"] = side
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
