"""Which memories `Inject` puts in front of the model, per ranking, on labelled sets; and what each ranking costs.

The sets (bench/retrieval/*.json, but off_topic.json: general questions none of them is
about, for the silence gate) were written for this benchmark: each has a
large store of loosely related entries registered first (small talk; stand-up
notes), then the stores that hold what matters, and requests each listing the
entries a person would want injected. Requests paraphrase their entries and
rarely share words with them; in `engineering`, many hinge on an exact
identifier, error message, product code or name.

- `assistant`: a personal assistant (56 requests; 440 small-talk entries, then
  preferences, facts, projects).
- `engineering`: an engineering team's assistant (55 requests; 480 stand-up notes,
  then people, decisions, incidents, runbooks).
- `support`: a customer-support team's assistant (52 requests; 460 past tickets about the
  same customers, then accounts, known issues, policies, playbooks), written after the
  default's weights were last fitted on the other two: 19 of its requests want two
  entries from different stores, and a customer's name is in 7 to 23 of the tickets as well
  as in its account.

Through the service (one server, the embedded Postgres, the server's model), for
each ranking: recall@5 of `Inject` (its five entries against the labelled ones)
and MRR of `SearchMemories` (the rank of the first labelled entry among ten). Rows
marked "outside" rank the same model's exact similarities in this process, for
what the service does not do: the reference's registration order, a cap per
store, MMR, and store descriptions weighed against the query.

Then the cost: `Inject` p50 per ranking, taking turns call by call, with a store
of 10,000 entries beside the sets' (so the vector index is used), and the added
p50 against `RANKING_SIMILARITY`. The reranker row times the plumbing against a
loopback reranker that answers at once (harness/stand_ins/reranker.py): no reranking
model ships inside a PyPI package here, so its quality is not measured.

    .venv/bin/python -m bench.retrieval            # (make bench)
    .venv/bin/python -m bench.retrieval --calls 40  # fewer timed calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
from contextfold import AsyncClient
from contextfold.v1 import memory_pb2
from contextfold_server.engine.entries import RetrievedEntry
from contextfold_server.engine.ranking import Ranking, candidates_per_store, stand_out_scores

from bench import corpus
from harness.servers import Postgres, start_server
from harness.stand_ins.reranker import FakeReranker

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "bench" / "retrieval"
SET_NAMES = ("assistant", "engineering", "support")
# General questions none of the sets is about, asked of each set's stores: what the default injects for them should
# be nothing (bench/weighing.py).
OFF_TOPIC = SETS / "off_topic.json"
RESULTS = ROOT / "bench" / "results"
SERVICE_RANKINGS = ("similarity", "store_aware", "hybrid")
ARCHIVE = "archive"
ARCHIVE_ENTRIES = 10_000


@dataclass
class LabelledSet:
    name: str
    stores: list[dict]
    queries: list[dict]

    @classmethod
    def load(cls, name: str) -> LabelledSet:
        data = json.loads((SETS / f"{name}.json").read_text())
        return cls(data["name"], data["stores"], data["queries"])


def recall_at(found: Sequence[str], relevant: Sequence[str], k: int = 5) -> float:
    return len(set(found[:k]) & set(relevant)) / len(relevant)


def reciprocal_rank(found: Sequence[str], relevant: Sequence[str]) -> float:
    return next((1.0 / rank for rank, entry in enumerate(found, start=1) if entry in relevant), 0.0)


async def through_service(cf: AsyncClient, labelled: LabelledSet, ranking: str) -> tuple[float, float, str]:
    """Recall@5 of Inject, MRR of SearchMemories (ten results), and the ranking the reports named."""
    recalls, ranks, named = [], [], set()
    for item in labelled.queries:
        messages = [{"role": "user", "content": [{"text": item["query"]}]}]
        result = await cf.inject(messages, ranking=ranking, stores=[s["name"] for s in labelled.stores])
        named.add(memory_pb2.Ranking.Name(result.report.ranking))
        recalls.append(recall_at([entry.id for entry in result.report.entries], item["relevant"]))
        found = await cf.search_memories(
            item["query"], ranking=ranking, max_results=10, stores=[s["name"] for s in labelled.stores]
        )
        ranks.append(reciprocal_rank([r.memory.id for r in found], item["relevant"]))
    return statistics.mean(recalls), statistics.mean(ranks), ",".join(sorted(named))


class Outside:
    """The set's exact similarities under the same model, for rankings the service does not offer."""

    def __init__(self, labelled: LabelledSet, model: corpus.LocalEmbedder) -> None:
        self.ids = [e["id"] for s in labelled.stores for e in s["entries"]]
        self.stores = [s["name"] for s in labelled.stores for _ in s["entries"]]
        texts = [e["content"] for s in labelled.stores for e in s["entries"]]
        self.vectors = corpus.encode(model, texts)
        self.queries = corpus.encode(model, [q["query"] for q in labelled.queries])
        self.descriptions = dict(
            zip(
                [s["name"] for s in labelled.stores],
                corpus.encode(model, [s["description"] for s in labelled.stores]),
                strict=True,
            )
        )
        self.order = [s["name"] for s in labelled.stores]
        self.labelled = labelled

    def score(self, rank: Callable[[np.ndarray, np.ndarray], list[int]]) -> tuple[float, float]:
        recalls, ranks = [], []
        for item, query in zip(self.labelled.queries, self.queries, strict=True):
            found = [self.ids[i] for i in rank(self.vectors @ query, query)]
            recalls.append(recall_at(found, item["relevant"]))
            ranks.append(reciprocal_rank(found[:10], item["relevant"]))
        return statistics.mean(recalls), statistics.mean(ranks)

    def registration_order(self, similarity: np.ndarray, query: np.ndarray, k: int = 5) -> list[int]:
        """The reference: each store's k best, stores concatenated in registration order, cut to k."""
        found: list[int] = []
        for store in self.order:
            members = [i for i in np.argsort(-similarity) if self.stores[i] == store]
            found.extend(members[:k])
        return found[:k] + [i for i in np.argsort(-similarity) if i not in found[:k]]

    def capped(self, similarity: np.ndarray, query: np.ndarray, cap: int = 2) -> list[int]:
        taken: dict[str, int] = defaultdict(int)
        first: list[int] = []
        rest: list[int] = []
        for i in np.argsort(-similarity):
            (first if taken[self.stores[i]] < cap else rest).append(int(i))
            taken[self.stores[i]] += 1
        return first + rest

    def mmr(self, similarity: np.ndarray, query: np.ndarray, balance: float = 0.7, pool: int = 40) -> list[int]:
        left = [int(i) for i in np.argsort(-similarity)[:pool]]
        chosen: list[int] = []
        while left:
            best = max(
                left,
                key=lambda i: (
                    balance * similarity[i]
                    - (1 - balance) * max((float(self.vectors[i] @ self.vectors[j]) for j in chosen), default=0.0)
                ),
            )
            chosen.append(best)
            left.remove(best)
        return chosen

    def described(self, similarity: np.ndarray, query: np.ndarray, weight: float = 0.2) -> list[int]:
        """Store-aware, each entry lifted by its store's description's similarity to the query."""
        entries = [RetrievedEntry(str(i), self.stores[i], "", float(similarity[i])) for i in range(len(self.ids))]
        nearest = []
        for store in self.order:
            members = sorted((e for e in entries if e.store == store), key=lambda e: -e.score)
            nearest.extend(members[: candidates_per_store(Ranking.STORE_AWARE, 5)])
        scores = stand_out_scores(nearest)
        for entry in nearest:
            scores[entry.id] += weight * float(self.descriptions[entry.store] @ query)
        return [int(i) for i in sorted(scores, key=lambda i: -scores[i])]


async def fill(cf: AsyncClient, labelled: LabelledSet) -> None:
    """The set's stores in their order (registration order matters to the reference), entries embedded
    by the server."""
    for store in labelled.stores:
        await cf.create_store(store["name"], description=store["description"])
        entries = store["entries"]
        for start in range(0, len(entries), 64):
            await cf.add_memories(
                store["name"], [{"id": e["id"], "content": e["content"]} for e in entries[start : start + 64]]
            )


async def add_archive(cf: AsyncClient) -> None:
    """10,000 further entries (bench/corpus.py's, embedded once and cached; vectors supplied), so searches
    use the vector index."""
    texts, vectors = corpus.entries(ARCHIVE_ENTRIES, base=ARCHIVE_ENTRIES)
    await cf.create_store(ARCHIVE, description="Older notes.")
    for start in range(0, ARCHIVE_ENTRIES, 500):
        await cf.add_memories(
            ARCHIVE,
            [
                {"content": t, "vector": v.tolist()}
                for t, v in zip(texts[start : start + 500], vectors[start : start + 500], strict=True)
            ],
        )


async def latencies(cf: AsyncClient, queries: list[str], rankings: Sequence[str], calls: int) -> dict[str, dict]:
    """Inject's p50 per ranking (the rankings take turns call by call), and its `rank` stage's."""
    samples: dict[str, list[float]] = defaultdict(list)
    ranked: dict[str, list[float]] = defaultdict(list)
    for call in range(calls + 10):
        messages = [{"role": "user", "content": [{"text": queries[call % len(queries)]}]}]
        for ranking in rankings:
            started = time.perf_counter()
            result = await cf.inject(messages, ranking=ranking)
            elapsed = time.perf_counter() - started
            if call >= 10:  # the first calls warm the embedding cache and the plans
                samples[ranking].append(elapsed * 1000)
                stage = result.report.stage_durations.get("rank")
                ranked[ranking].append(stage.ToNanoseconds() / 1e6 if stage else 0.0)
    return {
        ranking: {"p50_ms": statistics.median(samples[ranking]), "rank_p50_ms": statistics.median(ranked[ranking])}
        for ranking in rankings
    }


def analyze(database_url: str) -> None:
    """Fresh planner statistics, as autovacuum keeps them once a table settles: timings then show the
    plans a running service uses, not those of a table the planner still thinks empty."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE contextfold.memories")


async def measure(address: str, database_url: str, calls: int) -> dict:
    model = corpus.local_model()
    sets = [LabelledSet.load(name) for name in SET_NAMES]
    quality: dict[str, dict[str, dict[str, float | str]]] = defaultdict(dict)
    async with AsyncClient(address, timeout=120) as cf:
        for labelled in sets:
            await fill(cf, labelled)
        analyze(database_url)
        for labelled in sets:
            for ranking in (*SERVICE_RANKINGS, "rerank"):
                if ranking == "rerank":
                    continue  # no reranking model here: its quality is not measured
                recall, mrr, named = await through_service(cf, labelled, ranking)
                quality[ranking][labelled.name] = {"recall@5": recall, "mrr": mrr, "reported": named}
            outside = Outside(labelled, model)
            for name, rank in (
                ("outside: registration order (the reference)", outside.registration_order),
                ("outside: at most 2 per store", outside.capped),
                ("outside: MMR (0.7)", outside.mmr),
                ("outside: store-aware + store descriptions", outside.described),
            ):
                recall, mrr = outside.score(rank)
                quality[name][labelled.name] = {"recall@5": recall, "mrr": mrr}
        queries = [q["query"] for labelled in sets for q in labelled.queries]
        rankings = (*SERVICE_RANKINGS, "rerank")
        cost = {"sets": await latencies(cf, queries, rankings, calls)}
        await add_archive(cf)
        analyze(database_url)
        cost["archive"] = await latencies(cf, queries, rankings, calls)
    stores = [store for labelled in sets for store in labelled.stores]
    return {"quality": quality, "cost": cost, "entries": sum(len(s["entries"]) for s in stores), "stores": len(stores)}


def table(results: dict) -> str:
    """One row per ranking: recall@5 and MRR on each set, and Inject's p50 and what the ranking adds to
    it, over the sets' stores and with the 10,000-entry store beside them."""
    quality, cost, stores = results["quality"], results["cost"], results["stores"]
    lines = [
        "| ranking | "
        + " | ".join(f"{name} recall@5 | {name} MRR" for name in SET_NAMES)
        + f" | mean recall@5 | Inject p50, {stores} stores | added"
        + f" | Inject p50, {stores + 1} stores (+10,000) | added |",
        "|---|" + "---|---|" * len(SET_NAMES) + "---|---|---|---|---|",
    ]

    def timing(name: str) -> str:
        if name not in cost["sets"]:
            return "(not in the service) | | | "
        cells = []
        for case in ("sets", "archive"):
            p50, base = cost[case][name]["p50_ms"], cost[case]["similarity"]["p50_ms"]
            cells.append(f"{p50:.2f} ms | {p50 - base:+.2f} ms")
        return " | ".join(cells)

    for name, per_set in quality.items():
        cells = " | ".join(f"{per_set[s]['recall@5']:.3f} | {per_set[s]['mrr']:.3f}" for s in SET_NAMES)
        mean = statistics.fmean(per_set[s]["recall@5"] for s in SET_NAMES)
        lines.append(f"| {name} | {cells} | {mean:.3f} | {timing(name)} |")
    lines.append(
        "| rerank (a loopback reranker answering at once: the plumbing only) | "
        + "n/a | n/a | " * len(SET_NAMES)
        + f"n/a | {timing('rerank')} |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=150, help="timed Inject calls per ranking")
    parser.add_argument("--json", type=Path, default=RESULTS / "retrieval.json")
    parser.add_argument(
        "--no-cross-validation", action="store_true", help="skip the cross-validated figures (bench/weighing.py)"
    )
    args = parser.parse_args()
    reranker = FakeReranker()
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(
            Path(scratch) / "server.log",
            "--database-url",
            database.url,
            "--reranker-url",
            f"{reranker.base_url}/rerank",
        )
        try:
            results = asyncio.run(measure(server.address, database.url, args.calls))
        finally:
            server.stop()
            database.cleanup()
            reranker.close()
    print(table(results))
    print(f"\n{results['entries']:,} labelled-set entries; cost measured with {ARCHIVE_ENTRIES:,} more beside them.")
    if not args.no_cross_validation:
        cross_validation()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")


def cross_validation() -> None:
    """The default's recall@5 on each of our sets fitted without it (bench/weighing.py), beside in-sample;
    and its silence on another set's requests."""
    from bench import weighing  # imported here: it imports this module

    table, _ = weighing.cross_validated(weighing.measure())
    held = {name: table[f"held out: {name}"]["own recall@5"] for name in SET_NAMES}
    crossed, inside = table["cross-validated"], table["in-sample"]
    print(
        "\nthe default, each set scored by the weights fitted without it (bench/weighing.py): "
        + ", ".join(f"{name} {value:.3f}" for name, value in held.items())
        + f"; mean recall@5 {crossed['own recall@5']:.3f} cross-validated ({inside['own recall@5']:.3f} in-sample,"
        f" {crossed['own recall@5 ungated']:.3f} with no silence gate); another set's requests silent"
        f" {crossed['own silence']:.0%}; general questions ({OFF_TOPIC.name}) silent"
        f" {crossed['own off-topic silence']:.0%}"
    )
    fell = crossed["own recall@5 ungated"] - crossed["own recall@5"]
    for target, met in (
        ("cross-validated mean recall@5 >= 0.90", crossed["own recall@5"] >= 0.90),
        (
            "general questions silent >= 80 % with recall@5 falling at most 0.02",
            crossed["own off-topic silence"] >= 0.80 and fell <= 0.02,
        ),
    ):
        print(f"target: {target}: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
