"""How much of a question's evidence a turn's sentences find that the turn's one vector does not.

Every entry is embedded whole today: one vector for a turn of one sentence or of six. A LoCoMo turn often says
several things ("Thanks, Caroline. It was tough, but I'm doing ok. Been reading that book you recommended..."), and
its vector is near none of them. This measures, on LoCoMo's development conversations, the design of an entry with
a vector for each of its sentences beside its own (`Speaker: sentence`, a shared photo's caption one of them): each
turn of a conversation ranked for each of its questions by the model's similarity to the turn, and by the best of
that and its sentences' similarities, recall of the labelled evidence at 5, 10, 20 and 30 by category (no other signal:
what the vectors alone find, as a pool the default weighs); the same on our labelled sets (bench/retrieval/), every
entry of a set's stores ranked for each request, where an entry of several sentences is mostly a support ticket. And
what it costs: a write, the texts and characters
embedded, whole and with the sentences of the turns that hold more than one; a read, the exact nearest twenty of
a conversation's scope in Postgres (pgvector, the server's embedded one) by the turns' vectors alone, by each
sentence a row beside its turn's, and by an array of vectors on the turn's row, the three taking turns.

It measures the model and Postgres alone, outside the service: the measurement the sentences' vectors the service
keeps (migration 24, memory/sentences.py) were chosen on (docs/injection.md, "A vector for each sentence"). The
server's own model (its ONNX graph, as `make run` builds it).

    .venv/bin/python -m bench.sentences
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence, Set
from pathlib import Path

import numpy as np
import psycopg
from contextfold_server.embedding.local import LocalEmbedder, exported_model
from contextfold_server.engine.weighing import SENTENCE_END
from pgvector.psycopg import register_vector

from bench import RESULTS, locomo
from bench.corpus import CACHE
from bench.retrieval import SET_NAMES, LabelledSet
from harness.servers import Postgres

DEPTHS = (5, 10, 20, 30)
NEAREST = 20  # the entries a read takes, as the default's pool takes each store's nearest
# A read by the turns' vectors alone, by sentence rows beside them, and by an array of vectors on each turn's row.
READS = {
    "the turns' vectors": "SELECT id FROM turns WHERE talk = %(talk)s ORDER BY embedding <=> %(q)s LIMIT %(n)s",
    "each sentence a row beside its turn's": (
        "SELECT id, min(embedding <=> %(q)s) AS d FROM said WHERE talk = %(talk)s GROUP BY id ORDER BY d LIMIT %(n)s"
    ),
    "an array of vectors on the turn's row": (
        "SELECT id, least(embedding <=> %(q)s, (SELECT min(v <=> %(q)s) FROM unnest(sentences) AS v)) AS d"
        " FROM turns WHERE talk = %(talk)s ORDER BY d LIMIT %(n)s"
    ),
}
BATCH = 256


def sentences(turn: locomo.Turn) -> list[str]:
    """The turn's sentences as the weighing splits them (`SENTENCE_END`: a shared photo's caption follows a sentence's
    end), each written `Speaker: sentence` as the turn is; [] for a turn of one."""
    return [f"{turn.speaker}: {part}" for part in split(turn.text)]


def split(text: str) -> list[str]:
    """The sentences of `text` (`SENTENCE_END`); [] for a text of one."""
    parts = [part for part in SENTENCE_END.split(text.strip()) if part.strip()]
    return parts if len(parts) > 1 else []


def stacked(vector: dict[str, np.ndarray], texts: list[str]) -> np.ndarray | None:
    """The vectors of `texts`, a row each; None for no texts (an entry of one sentence)."""
    return np.stack([vector[text] for text in texts]) if texts else None


def recalls(scores: np.ndarray, labels: list[str], wanted: Set[str], depths: Sequence[int]) -> dict[int, float]:
    """The share of `wanted` among the labels of the first of each of `depths` by `scores` (best first)."""
    order = np.argsort(-scores, kind="stable")
    return {depth: len(wanted & {labels[i] for i in order[:depth]}) / len(wanted) for depth in depths}


def best_of(whole: np.ndarray, each: list[np.ndarray | None], asked: np.ndarray) -> np.ndarray:
    """Each entry's similarity to `asked`: the best of its own vector's (`whole`, a row each) and its sentences'
    (`each`: a row per sentence, None for an entry of one)."""
    best = whole @ asked
    for index, said in enumerate(each):
        if said is not None:
            best[index] = max(best[index], float((said @ asked).max()))
    return best


def reads(talks: list[locomo.Conversation], vector: dict[str, np.ndarray]) -> dict[str, float]:
    """Each of `READS`' p50 in ms over every question, each asked of its own conversation, the reads taking turns."""
    rows = [(t, n, turn) for t in talks for n, turn in enumerate(t.turns)]
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        try:
            with psycopg.connect(database.url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                register_vector(conn)
                conn.execute("CREATE TABLE turns (talk text, id int, embedding vector, sentences vector[])")
                conn.execute("CREATE TABLE said (talk text, id int, embedding vector)")
                with conn.cursor() as cursor:
                    for talk, n, turn in rows:
                        said = [vector[s] for s in sentences(turn)]
                        cursor.execute(
                            "INSERT INTO turns VALUES (%s, %s, %s, %s)",
                            (talk.name, n, vector[turn.content()], said or None),
                        )
                        for each in [vector[turn.content()], *said]:
                            cursor.execute("INSERT INTO said VALUES (%s, %s, %s)", (talk.name, n, each))
                conn.execute("CREATE INDEX ON turns (talk)")
                conn.execute("CREATE INDEX ON said (talk)")
                conn.execute("ANALYZE")
                times: dict[str, list[float]] = {name: [] for name in READS}
                for talk in talks:
                    for question in talk.questions:
                        asked = {"talk": talk.name, "q": vector[question.text], "n": NEAREST}
                        for name, read in READS.items():
                            started = time.perf_counter()
                            conn.execute(read, asked).fetchall()
                            times[name].append((time.perf_counter() - started) * 1000)
        finally:
            database.cleanup()
    return {name: statistics.median(taken) for name, taken in times.items()}


def vectors(model: LocalEmbedder, texts: list[str]) -> dict[str, np.ndarray]:
    """Each text's vector, unit length."""
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(texts), BATCH):
        chunk = texts[start : start + BATCH]
        for text, vector in zip(chunk, model.encode(chunk), strict=True):
            array = np.asarray(vector, dtype=np.float32)
            found[text] = array / np.linalg.norm(array)
    return found


def every_vector(talks: list[locomo.Conversation], model: LocalEmbedder) -> dict[str, np.ndarray]:
    """The vectors of every turn, every sentence of one and every question."""
    texts = {turn.content() for talk in talks for turn in talk.turns}
    texts |= {sentence for talk in talks for turn in talk.turns for sentence in sentences(turn)}
    texts |= {question.text for talk in talks for question in talk.questions}
    return vectors(model, sorted(texts))


def measure(talks: list[locomo.Conversation], vector: dict[str, np.ndarray]) -> dict[str, dict[str, dict[int, float]]]:
    """Recall of each category's evidence among each ranking's first `DEPTHS` turns (the questions' mean)."""
    # By the turn's text: a turn's label (`D1:3`) names it within its conversation only.
    said_by = {turn.content(): sentences(turn) for talk in talks for turn in talk.turns}
    found: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for talk in talks:
        labels = [turn.dia_id for turn in talk.turns]
        whole = np.stack([vector[turn.content()] for turn in talk.turns])
        each = [stacked(vector, said_by[turn.content()]) for turn in talk.turns]
        for question in talk.questions:
            asked = vector[question.text]
            turns, best = whole @ asked, best_of(whole, each, asked)
            category = locomo.CATEGORIES[question.category]
            for ranking, scores in (("the turn's vector", turns), ("the best of it and its sentences'", best)):
                for depth, recall in recalls(scores, labels, question.evidence, DEPTHS).items():
                    found[ranking][category][depth].append(recall)
                    found[ranking]["all"][depth].append(recall)
    return {
        ranking: {kind: {depth: statistics.fmean(v) for depth, v in depths.items()} for kind, depths in kinds.items()}
        for ranking, kinds in found.items()
    }


def our_sets(model: LocalEmbedder) -> dict[str, dict[str, float]]:
    """Our labelled sets: for each, recall@5 and @10 of each request's entries among all its stores' entries, by the
    entries' vectors and by the best of them and their sentences', and how many entries hold several sentences."""
    found: dict[str, dict[str, float]] = {}
    for name in SET_NAMES:
        labelled = LabelledSet.load(name)
        entries = [(entry["id"], entry["content"]) for store in labelled.stores for entry in store["entries"]]
        parts = [split(content) for _, content in entries]
        texts = {content for _, content in entries} | {part for said in parts for part in said}
        vector = vectors(model, sorted(texts | {request["query"] for request in labelled.queries}))
        labels = [entry_id for entry_id, _ in entries]
        whole = np.stack([vector[content] for _, content in entries])
        each = [stacked(vector, said) for said in parts]
        figures: dict[str, list[float]] = defaultdict(list)
        for request in labelled.queries:
            asked, wanted = vector[request["query"]], set(request["relevant"])
            for ranking, scores in (("entry", whole @ asked), ("best", best_of(whole, each, asked))):
                for depth, recall in recalls(scores, labels, wanted, (5, 10)).items():
                    figures[f"{ranking}@{depth}"].append(recall)
        several = sum(1 for said in parts if said)
        found[name] = {"entries": len(entries), "of_several_sentences": several} | {
            figure: statistics.fmean(values) for figure, values in figures.items()
        }
    return found


def cost(talks: list[locomo.Conversation]) -> dict[str, float]:
    """What a write embeds: the turns whole, and the sentences of those of more than one."""
    turns = [turn for talk in talks for turn in talk.turns]
    said = [sentences(turn) for turn in turns]
    whole_chars = sum(len(turn.content()) for turn in turns)
    sentence_chars = sum(len(s) for parts in said for s in parts)
    return {
        "turns": len(turns),
        "turns_of_several_sentences": sum(1 for parts in said if parts),
        "sentences_embedded": sum(len(parts) for parts in said),
        "texts_ratio": (len(turns) + sum(len(parts) for parts in said)) / len(turns),
        "characters_ratio": (whole_chars + sentence_chars) / whole_chars,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="LoCoMo's development split")
    parser.add_argument("--json", type=Path, default=RESULTS / "sentences.json")
    args = parser.parse_args()
    talks = locomo.conversations(args.data)
    model = LocalEmbedder(exported_model(CACHE / "models"), threads=2)
    vector = every_vector(talks, model)
    recalls = measure(talks, vector)
    categories = ["single-hop", "temporal", "multi-hop", "open-domain", "all"]
    print(f"LoCoMo's development split ({len(talks)} conversations), each question's turns ranked by the model alone")
    print(f"{'ranked by':36} {'depth':>5} " + " ".join(f"{c:>11}" for c in categories))
    for ranking, kinds in recalls.items():
        for depth in DEPTHS:
            print(f"{ranking:36} {depth:>5} " + " ".join(f"{kinds[c][depth]:>11.3f}" for c in categories))
    ours = our_sets(model)
    print("our labelled sets, each request's entries among all its stores' (recall, by the model alone):")
    for name, row in ours.items():
        print(
            f"  {name:12} @5 {row['entry@5']:.3f} by the entry's vector, {row['best@5']:.3f} by the best of its"
            f" sentences'; @10 {row['entry@10']:.3f}, {row['best@10']:.3f}"
            f" ({row['of_several_sentences']:.0f} of {row['entries']:.0f} entries hold several sentences)"
        )
    written = cost(talks)
    print(
        f"a write embeds {written['texts_ratio']:.2f} x the texts and {written['characters_ratio']:.2f} x the"
        f" characters ({written['turns_of_several_sentences']:,} of {written['turns']:,} turns hold more than one"
        f" sentence; {written['sentences_embedded']:,} sentences)"
    )
    read = reads(talks, vector)
    print(f"a read of a conversation's scope, its nearest {NEAREST} exactly (p50 over every question, in turns):")
    for name, taken in read.items():
        print(f"  {name:40} {taken:6.2f} ms")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"recall": recalls, "our_sets": ours, "write": written, "read_ms": read}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
