"""Entries and questions that read like an agent's memory, embedded by the model the server uses.

Random vectors flatter or punish an index in ways real text does not: sentences
embedded by all-MiniLM-L6-v2 lie in a space of far lower intrinsic dimension
than random points. So the benchmark stores sentences built from templates
(people, preferences, places, plans, tools), embedded by the model. The model
embeds several hundred sentences a second on two cores, too slow to embed 100,000 per
run: a base of real embeddings is embedded once and cached in
bench/results/cache, and each further entry joins two base facts, its vector the
normalized blend of theirs, so it stays on the model's manifold.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from contextfold_server.embedding.local import LocalEmbedder

CACHE = Path(__file__).resolve().parent / "results" / "cache"


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split(", "))


_NAMES = _words(
    "Ana, Bram, Chen, Dara, Eli, Farah, Goran, Hana, Ivo, Jun, Kemi, Lars, Mira, Nico, Omar, Priya, Quinn, Rosa,"
    " Sami, Tomas, Uma, Vera, Wen, Xavi, Yara, Zane, Aiko, Bodhi, Cleo, Dmitri"
)
_DRINKS = _words("espresso, green tea, oat latte, sparkling water, black coffee, chai, matcha, orange juice")
_FOODS = _words("peanuts, shellfish, gluten, dairy, eggs, soy, sesame, strawberries")
_CITIES = _words("Lisbon, Nairobi, Osaka, Toronto, Krakow, Lima, Hanoi, Oslo, Austin, Porto, Seoul, Dublin")
_RELATIONS = _words("sister, brother, manager, daughter, son, partner, landlord, mentor")
_TOOLS = _words("Python, Rust, Go, Figma, Excel, Terraform, Kubernetes, Postgres, React, Blender")
_TASKS = _words(
    "data pipelines, quarterly reports, the mobile app, infrastructure, design reviews,"
    " the billing service, onboarding docs, load tests"
)
_PROJECTS = _words("Atlas, Beacon, Comet, Delta, Ember, Falcon, Granite, Harbor, Iris, Juniper")
_DAYS = _words("Monday, Tuesday, Wednesday, Thursday, Friday, the end of the month, next quarter")
_HOBBIES = _words("climbing, chess, sourdough baking, trail running, watercolours, jazz piano, birding, sailing")
_TIMES = _words("morning, afternoon, evening, late at night")

_FACTS = (
    lambda r: f"{r.choice(_NAMES)} prefers {r.choice(_DRINKS)} in the {r.choice(_TIMES)}.",
    lambda r: f"{r.choice(_NAMES)} is allergic to {r.choice(_FOODS)}; avoid it when ordering food.",
    lambda r: f"{r.choice(_NAMES)}'s {r.choice(_RELATIONS)} lives in {r.choice(_CITIES)}.",
    lambda r: f"{r.choice(_NAMES)} uses {r.choice(_TOOLS)} for {r.choice(_TASKS)}.",
    lambda r: f"The {r.choice(_PROJECTS)} deadline moved to {r.choice(_DAYS)}.",
    lambda r: f"{r.choice(_NAMES)} spends weekends on {r.choice(_HOBBIES)}.",
    lambda r: f"{r.choice(_NAMES)} will travel to {r.choice(_CITIES)} on {r.choice(_DAYS)} for {r.choice(_PROJECTS)}.",
    lambda r: f"{r.choice(_NAMES)} asked for {r.choice(_TASKS)} to be reviewed before {r.choice(_DAYS)}.",
)
_QUESTIONS = (
    lambda r: f"What does {r.choice(_NAMES)} like to drink?",
    lambda r: f"Which foods should {r.choice(_NAMES)} avoid?",
    lambda r: f"Where does {r.choice(_NAMES)}'s family live?",
    lambda r: f"What tools does {r.choice(_NAMES)} work with?",
    lambda r: f"When is the {r.choice(_PROJECTS)} deadline?",
    lambda r: f"What are {r.choice(_NAMES)}'s hobbies?",
    lambda r: f"Is anyone travelling to {r.choice(_CITIES)} soon?",
    lambda r: f"What needs reviewing before {r.choice(_DAYS)}?",
)


def facts(count: int, seed: int = 7) -> list[str]:
    """`count` memory entries; entry n is the same in every run."""
    rng = random.Random(seed)
    return [f"{rng.choice(_FACTS)(rng)} (note {n})" for n in range(count)]


def questions(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_QUESTIONS)(rng) for _ in range(count)]


def entries(count: int, base: int) -> tuple[list[str], np.ndarray]:
    """`count` entries and their unit vectors: the first `base` embedded by the model, the rest blends."""
    base = min(base, count)
    texts = facts(base)
    vectors = embed(texts, "facts")
    extra = count - base
    if extra:
        first, second, mixed = blends(vectors, extra, np.random.default_rng(3))
        vectors = np.vstack([vectors, mixed])
        texts += blended_texts(texts, first, second)
    return texts, vectors


def blended_texts(texts: list[str], first: np.ndarray, second: np.ndarray) -> list[str]:
    """The text of each blend `blends` makes: the texts of the two entries it joins."""
    return [f"{texts[i]} Also: {texts[j]}" for i, j in zip(first, second, strict=True)]


def blends(vectors: np.ndarray, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which two of `vectors` each of `count` blends joins (first, second), and the blends: unit
    vectors, 0.55 to 0.85 of the first, on the model's manifold yet none of them a stored vector."""
    first, second = rng.integers(0, len(vectors), count), rng.integers(0, len(vectors), count)
    weight = rng.uniform(0.55, 0.85, (count, 1)).astype(np.float32)
    mixed = weight * vectors[first] + (1 - weight) * vectors[second]
    return first, second, mixed / np.linalg.norm(mixed, axis=1, keepdims=True)


def local_model(threads: int | None = None) -> LocalEmbedder:
    """The server's local model, loaded in this process (its export cached with the benchmark's)."""
    from contextfold_server.config import available_cores
    from contextfold_server.embedding.local import LocalEmbedder, exported_model

    return LocalEmbedder(exported_model(CACHE / "models"), threads=threads or available_cores())


def encode(model: LocalEmbedder, texts: list[str]) -> np.ndarray:
    """The texts' unit vectors from `model`, 64 texts a call."""
    return np.vstack([np.asarray(model.encode(texts[i : i + 64]), dtype=np.float32) for i in range(0, len(texts), 64)])


def embed(texts: list[str], name: str) -> np.ndarray:
    """The texts' unit vectors from the server's model, cached under bench/results/cache."""
    path = CACHE / f"{name}-{len(texts)}.npy"
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    vectors = encode(local_model(), texts)
    print(f"embedded {len(texts):,} {name} in {time.perf_counter() - started:.0f} s (cached in {path})")
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors
