"""The default ranking's weights and silence threshold, fitted and judged by cross-validation.

Every question of the development data goes through `Inject` once, explained: each candidate's
signals (`CandidateReport.inputs`) and whether it is labelled relevant. The data: LoCoMo's
development conversations (bench/locomo.py's way: each turn one memory, in one store with its
session's id and in another without), and our own labelled sets (bench/retrieval.py's stores).
Each question is also asked where nothing is about it, for the silence gate: a LoCoMo question in
the next conversation's scope, a request of one of our sets against the next set's stores; and general
questions none of our sets is about (bench/retrieval/off_topic.json) against each set's stores.

The fit: a logistic regression of relevance on the signals (candidates of a question weighed
together; L2, its strength chosen among a few by the same rotation), which the silence gate weighs;
the order's weights are those tuned, one signal at a time, for recall@5 (`tune`); then the gate (the
threshold, the weight of the question's unknown names and a floor under the similarity) chosen as the
most silence on the questions asked elsewhere that keeps recall@5 within `RECALL_GIVEN` of the ungated
fit. Judged by
cross-validation by group (each LoCoMo conversation, each of our sets): fitted without the group,
scored on it, in turn. The weights in engine/weighing.json are the fit on all the groups
(`--write`); the figures to quote are the cross-validated ones.

    .venv/bin/python -m bench.weighing            # the cross-validated figures (make bench)
    .venv/bin/python -m bench.weighing --write    # and fit engine/weighing.json on all the data
    .venv/bin/python -m bench.weighing --questions /tmp/asked.json   # collect once, then fit from the file
    .venv/bin/python -m bench.weighing --scopes   # how the likest candidate's similarity moves with a scope's size
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from contextfold import Client, InjectResult
from contextfold_server.engine.weighing import (
    FITTED_SIGNALS,
    GATE_SIGNALS,
    SIGNALS,
    UNKNOWN_NAMES,
    WEIGHTS_FILE,
    Weighing,
    alone,
    content_words,
    topic_words,
    words_copy,
)

from bench import RESULTS, corpus, locomo
from bench.retrieval import OFF_TOPIC, SET_NAMES, LabelledSet
from harness.messages import user
from harness.servers import Postgres, start_server

ASKED = 10  # entries asked for: the pool bench/locomo.py's questions are ranked from
SHOWN = 5  # recall@5
# The gate may cost recall@5 this much (LoCoMo's development questions) against no gate at all.
RECALL_GIVEN = 0.01
# The silence the gate aims for on LoCoMo's questions asked elsewhere (the target is 0.8; the rest a margin
# for conversations it was not chosen on).
SILENCE_WANTED = 0.85
L2_CHOICES = (0.1, 1.0, 10.0)
THRESHOLDS = tuple(round(x, 2) for x in np.arange(-6.0, 1.51, 0.25))
# The weights the question's unknown names may take in the gate: up to 4, chosen by cross-validation among
# caps of 2, 4, 8 and 16 (docs/injection.md, "The default's weighing"). Past 4 the gate leans on names alone:
# LoCoMo's questions asked elsewhere name the other conversation's people, but a request of our own sets may
# name a city or a person its scope has not heard of and still want the user's preferences.
UNKNOWN_WEIGHTS = (0.0, 1.0, 2.0, 4.0)
# The floors the gate may put under a candidate's similarity to the question: none (-1), or 0, no entry pointing away
# from it. Chosen among 0 to 0.3 by steps of 0.05, the fit took 0.2 (docs/injection.md, "The gate's floor"), which
# leaves out, entry by entry, what a vague follow-up asks about ("Anything else I should know for the trip or the
# editor?" is 0.03 to 0.16 similar to the trip's and the editor's entries, among entries about other things): the
# development data holds no such questions. Where nothing in scope is more like it, `LEASTS` below silences it.
FLOORS = (-1.0, 0.0)
# The similarities one of a question's candidates may have to reach for any to be injected (`Weighing.least`): none
# (-1), or one of these, chosen as the least that silences `SILENCE_WANTED` of the general questions asked of our
# sets' stores (`OFF_TOPIC_CATEGORY`) within the recall allowed. The floor above judges each candidate; this judges
# the question: "What is 17 times 23?" asked of a team's decisions is 0.21 like the likest of them. The service asks
# a smaller scope for less (`Weighing.least_for`, read off by `scopes`); the development data's scopes, of 369 to 680
# entries, are asked the least chosen here up to 0.25.
LEASTS = (-1.0, 0.1, 0.15, 0.2, 0.225, 0.25, 0.275, 0.3)
# The shares of their words two candidates must hold in common for one to echo the other (`weighing.alone`), chosen
# inside each fold (`cross_validated`) and for the fit on all (`fit_echoed`).
ECHO_SHARES = (0.2, 0.3, 0.4)
# The category of a general question none of our sets is about, asked of each set's stores (`collect`).
OFF_TOPIC_CATEGORY = "off-topic"
SIMILARITY = SIGNALS.index("similarity")


@dataclass
class Candidate:
    id: str
    content: str
    inputs: dict[str, float]
    relevant: bool
    label: str = ""  # what the data calls it: a LoCoMo turn's dia_id ("D3:5", the third session's)


@dataclass
class Question:
    group: str  # the conversation or set it is about
    kind: str  # "sessions", "no sessions" (LoCoMo's two stores) or "own"
    category: str
    relevant: int  # how many entries are labelled relevant; 0 for a question asked where nothing is about it
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def elsewhere(self) -> bool:
        return self.relevant == 0

    @property
    def silence(self) -> str:
        """The figure a question asked where nothing is about it counts in: its kind's silence, or the silence on
        general questions (`OFF_TOPIC_CATEGORY`)."""
        return f"{self.kind} off-topic silence" if self.category == OFF_TOPIC_CATEGORY else f"{self.kind} silence"

    @functools.cached_property
    def signals(self) -> np.ndarray:
        """The candidates' signals, a row each, in `SIGNALS` order."""
        return _matrix(self.candidates)

    @functools.cached_property
    def labels(self) -> np.ndarray:
        return np.array([c.relevant for c in self.candidates], dtype=bool)

    @functools.cached_property
    def unknown_names(self) -> float:
        return self.candidates[0].inputs.get(UNKNOWN_NAMES, 0.0) if self.candidates else 0.0

    @functools.cached_property
    def copies(self) -> list[set[int]]:
        """For each candidate, the others it is a near-copy of (`near_copy`), by position."""
        words = [content_words(c.content) for c in self.candidates]
        return [
            {j for j, theirs in enumerate(words) if j != i and words_copy(mine, [theirs])}
            for i, mine in enumerate(words)
        ]


def _candidates(
    result: InjectResult, relevant: Callable[[str], bool], labels: dict[str, str] | None = None
) -> list[Candidate]:
    return [
        Candidate(c.id, c.content, dict(c.inputs), relevant(c.id), (labels or {}).get(c.id, ""))
        for c in result.report.candidates
        if c.inputs  # excluded before ranking: not weighed
    ]


def collect(cf: Client, database: Postgres) -> list[Question]:
    """Every development question through Inject, explained (see the module's docstring), each asked once the
    entries' sentences are embedded (in `database`, the server's)."""
    talks = locomo.conversations(locomo.DEFAULT_DATA) if locomo.DEFAULT_DATA.exists() else []
    questions: list[Question] = []
    for store, sessions in (("locomo-sessions", True), ("locomo-plain", False)):
        cf.create_store(store, description="the turns of long conversations")
        ids: dict[str, str] = {}
        for talk in talks:
            ids |= locomo.load(cf, talk, store=store, sessions=sessions)
        database.sentences_settled()
        for index, talk in enumerate(talks):
            elsewhere = talks[(index + 1) % len(talks)]
            for question in talk.questions:
                for scope, evidence in ((talk.name, question.evidence), (elsewhere.name, frozenset())):
                    result = cf.inject(
                        [user(question.text)], stores=[store], scope={"user_id": scope}, max_entries=ASKED, explain=True
                    )
                    asked = Question(
                        talk.name,
                        "sessions" if sessions else "no sessions",
                        locomo.CATEGORIES[question.category],
                        len(evidence),
                    )
                    asked.candidates = _candidates(result, functools.partial(_labelled, ids, evidence), ids)
                    questions.append(asked)
    sets = [LabelledSet.load(name) for name in SET_NAMES]
    off_topic = json.loads(OFF_TOPIC.read_text())["questions"]
    for labelled in sets:
        for kept in labelled.stores:
            name = f"{labelled.name}.{kept['name']}"
            cf.create_store(name, description=kept["description"])
            entries = kept["entries"]
            for start in range(0, len(entries), 64):
                cf.add_memories(name, [{"id": e["id"], "content": e["content"]} for e in entries[start : start + 64]])
    database.sentences_settled()
    for index, labelled in enumerate(sets):
        other = sets[(index + 1) % len(sets)]
        stores = [f"{labelled.name}.{s['name']}" for s in labelled.stores]
        asked_of = [(q["query"], q["relevant"], "requests") for q in labelled.queries]
        asked_of += [(q["query"], [], "requests") for q in other.queries]
        asked_of += [(text, [], OFF_TOPIC_CATEGORY) for text in off_topic]
        for text, relevant, category in asked_of:
            result = cf.inject([user(text)], stores=stores, max_entries=ASKED, explain=True)
            asked = Question(labelled.name, "own", category, len(relevant))
            asked.candidates = _candidates(result, frozenset(relevant).__contains__)
            questions.append(asked)
    return questions


def _labelled(ids: dict[str, str], evidence: frozenset[str], entry: str) -> bool:
    """Whether the entry stored under `entry` is a turn (its label, by `ids`) of `evidence`."""
    return ids.get(entry, "") in evidence


def _matrix(candidates: Sequence[Candidate]) -> np.ndarray:
    return np.array([[c.inputs.get(name, 0.0) for name in SIGNALS] for c in candidates]).reshape(-1, len(SIGNALS))


def fit_weights(
    questions: Sequence[Question], l2: float, names: Sequence[str] = FITTED_SIGNALS
) -> tuple[np.ndarray, float]:
    """A logistic regression of relevance on the signals, over the candidates of the questions that have
    relevant entries (each question's candidates weighing as much as another's, the relevant as much as
    the rest): weights per signal of `names` (in `SIGNALS` order, 0 for the others) and an intercept, in
    the signals' own units.

    No weight is negative: every signal is one more reason to think an entry relevant. Signals that
    move together (a lead over the crowd is a similarity less the crowd's) would otherwise trade
    weights, one negative, and a candidate where one of them is missing (a store with one candidate
    has no lead) would be ranked by the negative one alone. A signal whose weight comes out negative is
    left out and the rest fitted again."""
    asked = [q for q in questions if not q.elsewhere and q.candidates]
    x = np.vstack([q.signals for q in asked])
    y = np.concatenate([q.labels for q in asked]).astype(float)
    per_question = np.concatenate([np.full(len(q.candidates), 1.0 / len(q.candidates)) for q in asked])
    positive = (per_question * y).sum() / per_question.sum()
    weight = per_question * np.where(y > 0, 0.5 / positive, 0.5 / (1 - positive))
    weight /= weight.mean()
    mean, spread = x.mean(axis=0), x.std(axis=0)
    spread[spread == 0] = 1.0
    used = np.array([name in names for name in SIGNALS])
    while True:
        z = np.hstack([((x - mean) / spread)[:, used], np.ones((len(x), 1))])
        w = _logistic(z, y, weight, l2)
        if (w[:-1] >= 0).all():
            break
        used[np.flatnonzero(used)[w[:-1] < 0]] = False
    weights = np.zeros(len(SIGNALS))
    weights[used] = w[:-1] / spread[used]
    return weights, float(w[-1] - (weights * mean).sum())


def _logistic(z: np.ndarray, y: np.ndarray, weight: np.ndarray, l2: float) -> np.ndarray:
    """Newton's method for a weighted logistic regression with an L2 penalty (not on the intercept, the
    last column of `z`)."""
    w = np.zeros(z.shape[1])
    penalty = np.r_[np.full(z.shape[1] - 1, l2), 0.0] / len(y)
    for _ in range(50):
        p = 1 / (1 + np.exp(-z @ w))
        gradient = z.T @ (weight * (p - y)) / len(y) + penalty * w
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z / len(y) + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def weighing(
    weights: np.ndarray,
    intercept: float,
    gate: tuple[np.ndarray, float],
    threshold: float,
    unknown: float,
    floor: float = -1.0,
    least: float = -1.0,
) -> Weighing:
    gated, gate_intercept = gate
    return Weighing(
        dict(zip(SIGNALS, map(float, weights), strict=True)),
        intercept,
        {name: float(gated[SIGNALS.index(name)]) for name in GATE_SIGNALS},
        gate_intercept,
        threshold,
        unknown,
        floor,
        least,
    )


def shown(question: Question, chosen: Weighing, gated: bool = True) -> list[int]:
    """What Inject would show for `question` weighed by `chosen` (positions among its candidates): the
    best `SHOWN`, near-copies of better ones left out, and with `gated` those not relevant enough."""
    return Ranked.of(question, chosen).shown(*_gate_numbers(chosen, gated))


def _gate_numbers(chosen: Weighing, gated: bool) -> tuple[float, float, float, float]:
    """`chosen`'s gate as `Ranked` tries it (threshold, unknown names' weight, floor, least); without `gated`, one
    that lets every candidate through."""
    if not gated:
        return (-np.inf, 0.0, -np.inf, -np.inf)
    return (chosen.threshold, chosen.unknown_names, chosen.floor, chosen.least)


def recall(question: Question, chosen: Weighing, gated: bool = True) -> float:
    return float(question.labels[shown(question, chosen, gated)].sum()) / question.relevant


def scores(questions: Sequence[Question], chosen: Weighing, gated: bool = True) -> dict[str, float]:
    """Recall@5 of the questions with relevant entries, and silence (the share showing nothing) of those
    asked elsewhere, by kind."""
    return Ranked.scores([Ranked.of(q, chosen) for q in questions], *_gate_numbers(chosen, gated))


def fit(questions: Sequence[Question]) -> Weighing:
    """The weighing fitted on `questions`: the L2 strength that scores best fitted (and tuned, `tune`) on all
    groups but one of them and scored on that one, each kind counting alike; the weights fitted with it on
    all of them and tuned; then the gate."""
    groups = sorted({q.group for q in questions})

    def inner(l2: float) -> float:
        kinds: list[np.ndarray] = []
        found: list[np.ndarray] = []
        for held in groups:
            fitted = [q for q in questions if q.group != held]
            w, _ = fit_weights(fitted, l2)
            scored = Batch.of([q for q in questions if q.group == held])
            kinds.append(scored.kinds)
            found.append(scored.recall(tune(fitted, w)))
        return balanced(np.concatenate(kinds), np.concatenate(found))

    l2 = max(L2_CHOICES, key=inner) if len(groups) > 2 else L2_CHOICES[1]
    w, b = fit_weights(questions, l2)
    # The gate weighs the fit's log-odds of relevance, the order what puts the relevant in the first five: a gate
    # fitted on the similarity and the words alone silenced 45 % of the LoCoMo questions asked elsewhere where
    # this one silences 86 %, at the same recall.
    return gate(questions, tune(questions, w), b, (w, b))


# The steps `tune` tries for a weight: each a multiple of its weight now (a weight at 0 tries the step's half).
TUNING_STEPS = (0.0, 0.5, 0.7, 0.85, 1.15, 1.4, 2.0, 3.0)
TUNING_ROUNDS = 6


def tune(questions: Sequence[Question], weights: np.ndarray) -> np.ndarray:
    """`weights` moved, one signal at a time (`TUNING_STEPS`), while the mean recall@5 of the questions with
    relevant entries rises, each kind of question (LoCoMo with session ids, without, our sets) counting as
    much as another (`balanced`): the logistic fit weighs every candidate, where Inject is judged by its
    first five. Near-copies are not left out here (`Batch.recall`); the figures quoted are `recall`'s."""
    asked = Batch.of(questions)
    best, weights = balanced(asked.kinds, asked.recall(weights)), weights.copy()
    for _ in range(TUNING_ROUNDS):
        moved = False
        for name in FITTED_SIGNALS:
            index = SIGNALS.index(name)
            for step in TUNING_STEPS:
                if name == "standing" and not step:
                    continue  # the standing stays weighed: a small store's lone entry has nothing else
                trial = weights.copy()
                trial[index] = weights[index] * step if weights[index] else step / 2
                found = balanced(asked.kinds, asked.recall(trial))
                if found > best + 1e-9:
                    best, weights, moved = found, trial, True
        if not moved:
            break
    return weights


@dataclass
class Batch:
    """The questions with relevant entries, their candidates in one array (padded to the most any has), to
    rank them all at once."""

    questions: list[Question]
    signals: np.ndarray  # questions x candidates x `SIGNALS`
    labels: np.ndarray  # questions x candidates: relevant
    present: np.ndarray  # questions x candidates: a candidate, not padding
    kinds: np.ndarray  # each question's kind

    @classmethod
    def of(cls, questions: Sequence[Question]) -> Batch:
        asked = [q for q in questions if not q.elsewhere and q.candidates]
        most = max((len(q.candidates) for q in asked), default=0)
        signals = np.zeros((len(asked), most, len(SIGNALS)))
        labels = np.zeros((len(asked), most), dtype=bool)
        present = np.zeros((len(asked), most), dtype=bool)
        for row, q in enumerate(asked):
            signals[row, : len(q.candidates)] = q.signals
            labels[row, : len(q.candidates)] = q.labels
            present[row, : len(q.candidates)] = True
        return cls(asked, signals, labels, present, np.array([q.kind for q in asked], dtype=str))

    def recall(self, weights: np.ndarray) -> np.ndarray:
        """Each question's share of its relevant entries among its first `SHOWN` candidates by `weights`."""
        if not self.questions:
            return np.zeros(0)
        scores = np.where(self.present, self.signals @ weights, -np.inf)
        first = np.argsort(-scores, axis=1, kind="stable")[:, :SHOWN]
        found = np.take_along_axis(self.labels & self.present, first, axis=1).sum(axis=1)
        return found / np.array([q.relevant for q in self.questions])


def balanced(kinds: np.ndarray, recalls: np.ndarray) -> float:
    """The mean of each kind's mean of `recalls` (`kinds`: each recall's question's kind)."""
    if not len(recalls):
        return 0.0
    _, index = np.unique(kinds, return_inverse=True)
    return float((np.bincount(index, weights=recalls) / np.bincount(index)).mean())


def gate(
    questions: Sequence[Question], weights: np.ndarray, intercept: float, relevance: tuple[np.ndarray, float]
) -> Weighing:
    """The gate: among the thresholds, unknown names' weights and similarity floors that keep recall@5
    (LoCoMo's either way, our own sets') within `RECALL_GIVEN` of no gate, the lowest threshold that
    silences `SILENCE_WANTED` of the LoCoMo questions asked elsewhere (either way), else the most silent;
    at that threshold, the highest floor. A floor leaves out what points away from the question, which the
    weighed signals may not: an entry that states something specific scores well on its own. Then, with
    those, the similarity the likest candidate must reach (`LEASTS`): the least that silences
    `SILENCE_WANTED` of the general questions asked of our sets' stores with recall@5 still within
    `RECALL_GIVEN` of no gate, else the one that silences most."""
    ungated = scores(questions, weighing(weights, intercept, relevance, -1e9, 0.0), gated=False)
    ranked = [Ranked.of(q, weighing(weights, intercept, relevance, 0.0, 0.0)) for q in questions]

    def within(found: dict[str, float]) -> bool:
        return all(
            found.get(f"{kind} recall@5", 0.0) >= ungated.get(f"{kind} recall@5", 0.0) - RECALL_GIVEN
            for kind in ("sessions", "no sessions", "own")
        )

    best: tuple[tuple[float, ...], Weighing] | None = None
    for floor, unknown, threshold in itertools.product(FLOORS, UNKNOWN_WEIGHTS, THRESHOLDS):
        found = Ranked.scores(ranked, threshold, unknown, floor)
        if not within(found):
            continue
        silence = min(found.get("sessions silence", 0.0), found.get("no sessions silence", 0.0))
        # Enough silence at the lowest threshold that gives it (the least a held-out question risks), else the
        # most silence there is; then the highest floor.
        enough = silence >= SILENCE_WANTED
        rank = (enough, -threshold if enough else silence, floor, silence)
        if best is None or rank > best[0]:
            best = (rank, weighing(weights, intercept, relevance, threshold, unknown, floor))
    if best is None:
        return weighing(weights, intercept, relevance, -1e9, 0.0)
    chosen = best[1]
    leasts: list[tuple[tuple[bool, float, float], float]] = []
    for least in LEASTS:
        found = Ranked.scores(ranked, chosen.threshold, chosen.unknown_names, chosen.floor, least)
        if least == LEASTS[0] or within(found):
            silence = found.get("own off-topic silence", 0.0)
            enough = silence >= SILENCE_WANTED
            leasts.append(((enough, -least if enough else silence, -least), least))
    return dataclasses.replace(chosen, least=max(leasts)[1])


@dataclass
class Ranked:
    """A question's candidates in the order a weighing ranks them, with their gate scores and similarities:
    the gate's thresholds, unknown names' weights and floors tried without ranking them again."""

    question: Question
    order: np.ndarray
    gated: np.ndarray  # in `order`: each one's gate score, its intercept included
    similarity: np.ndarray  # in `order`
    # In `order`: whether it answers the turn before it or holds the question's words (`Weighing.under_floor`).
    exempt: np.ndarray

    @classmethod
    def of(cls, question: Question, chosen: Weighing) -> Ranked:
        if not question.candidates:
            return cls(question, np.zeros(0, dtype=int), np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
        scored = question.signals @ np.array([chosen.weights[name] for name in SIGNALS]) + chosen.intercept
        gate = question.signals @ np.array([chosen.gate_weights.get(name, 0.0) for name in SIGNALS])
        order = np.argsort(-scored, kind="stable")
        # Not under a floor no similarity reaches: held to no floor at all.
        unbounded = dataclasses.replace(chosen, floor=float("inf"))
        exempt = np.array([not unbounded.under_floor(c.inputs) for c in question.candidates], dtype=bool)
        gated = (gate + chosen.gate_intercept)[order]
        return cls(question, order, gated, question.signals[order, SIMILARITY], exempt[order])

    def shown(self, threshold: float, unknown: float, floor: float, least: float = -np.inf) -> list[int]:
        """The best `SHOWN` that pass a gate of these numbers, near-copies of better ones left out (`shown`):
        none when no candidate is `least` like the question (`Weighing.reaches_least`)."""
        if not ((self.similarity >= least) | self.exempt).any():
            return []
        passing = (self.gated - unknown * self.question.unknown_names >= threshold) & (
            (self.similarity >= floor) | self.exempt
        )
        kept: list[int] = []
        for index in self.order[passing]:
            if len(kept) == SHOWN:
                break
            if not self.question.copies[index] & set(kept):
                kept.append(int(index))
        return kept

    @staticmethod
    def scores(
        ranked: Sequence[Ranked], threshold: float, unknown: float, floor: float, least: float = -np.inf
    ) -> dict[str, float]:
        """`scores` for a gate of these numbers."""
        found: dict[str, list[float]] = defaultdict(list)
        for r in ranked:
            kept = r.shown(threshold, unknown, floor, least)
            if r.question.elsewhere:
                found[r.question.silence].append(0.0 if kept else 1.0)
            else:
                found[f"{r.question.kind} recall@5"].append(float(r.question.labels[kept].sum()) / r.question.relevant)
        return {name: statistics.fmean(values) for name, values in found.items()}


def cross_validated(questions: Sequence[Question]) -> tuple[dict[str, dict[str, float]], Weighing]:
    """Each group's figures fitted without it (`fit_echoed`: the echo's share chosen on the other groups too), and
    the weighing fitted on all: by group, and in all (`cross-validated`, every held-out question together), with
    the in-sample figures of the fit on all (`in-sample`); the figures by LoCoMo category too, and the echo's share
    each fold chose."""
    groups = sorted({q.group for q in questions})
    table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for held in groups:
        chosen = fit_echoed([q for q in questions if q.group != held])
        table[f"held out: {held}"]["echo share"].append(chosen.echo_share)
        for q in echoed([q for q in questions if q.group == held], chosen.echo_share):
            if q.elsewhere:
                table["cross-validated"][q.silence].append(0.0 if shown(q, chosen) else 1.0)
                continue
            table["cross-validated"][f"{q.kind} recall@5"].append(recall(q, chosen))
            table["cross-validated"][f"{q.kind} recall@5 ungated"].append(recall(q, chosen, False))
            table["cross-validated"][f"{q.kind} {q.category}"].append(recall(q, chosen))
            table[f"held out: {held}"][f"{q.kind} recall@5"].append(recall(q, chosen))
    final = fit_echoed(questions)
    table["in-sample"]["echo share"].append(final.echo_share)
    for q in echoed(questions, final.echo_share):
        key = q.silence if q.elsewhere else f"{q.kind} recall@5"
        table["in-sample"][key].append((0.0 if shown(q, final) else 1.0) if q.elsewhere else recall(q, final))
    return {row: {k: statistics.fmean(v) for k, v in sorted(cells.items())} for row, cells in table.items()}, final


def fit_echoed(questions: Sequence[Question]) -> Weighing:
    """The fit (`fit`) on `questions` with their `alone` read at each of `ECHO_SHARES` in turn, whose recall@5 on
    them is best (each kind counting alike), that share its `echo_share`."""
    best: tuple[float, Weighing] | None = None
    for share in ECHO_SHARES:
        asked = echoed(questions, share)
        chosen = dataclasses.replace(fit(asked), echo_share=share)
        found = [q for q in asked if not q.elsewhere and q.candidates]
        score = balanced(np.array([q.kind for q in found], dtype=str), np.array([recall(q, chosen) for q in found]))
        if best is None or score > best[0]:
            best = (score, chosen)
    assert best is not None
    return best[1]


def echoed(questions: Sequence[Question], share: float) -> list[Question]:
    """`questions` with each candidate's `alone` read at `share` (`weighing.alone`), among the candidates its report
    holds: its best `MAX_EXPLAINED`, where the service reads it among all it found (docs/injection.md, "Said once or
    said again")."""
    return [_echoed(q, share) for q in questions]


def _echoed(question: Question, share: float) -> Question:
    """`question` with its candidates' `alone` at `share`: 1 for each in a session, as the service weighs them (every
    turn of LoCoMo's store with session ids is in one; none of our sets' entries, nor of the other store, is)."""
    if question.kind == "sessions":
        lonely = [1.0] * len(question.candidates)
    else:
        lonely = alone([topic_words(c.content) for c in question.candidates], share)
    candidates = [
        dataclasses.replace(c, inputs={**c.inputs, "alone": value})
        for c, value in zip(question.candidates, lonely, strict=True)
    ]
    return dataclasses.replace(question, candidates=candidates)


def measure() -> list[Question]:
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(Path(scratch) / "server.log", "--database-url", database.url)
        try:
            with Client(server.address, timeout=120) as cf:
                return collect(cf, database)
        finally:
            server.stop()
            database.cleanup()


def save(questions: Sequence[Question], path: Path) -> None:
    """What `measure` collected, to fit again without asking again (`--questions`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([dataclasses.asdict(q) for q in questions]))


def load(path: Path) -> list[Question]:
    return [
        Question(**{**raw, "candidates": [Candidate(**c) for c in raw["candidates"]]})
        for raw in json.loads(path.read_text())
    ]


def write(chosen: Weighing, path: Path = WEIGHTS_FILE) -> None:
    data = {
        "weights": {name: round(chosen.weights[name], 4) for name in SIGNALS},
        "intercept": round(chosen.intercept, 4),
        "gate": {
            "weights": {name: round(chosen.gate_weights[name], 4) for name in GATE_SIGNALS},
            "intercept": round(chosen.gate_intercept, 4),
            "threshold": float(chosen.threshold),
            "unknown_names": float(chosen.unknown_names),
            "floor": float(chosen.floor),
            "least": float(chosen.least),
        },
        "echo_share": float(chosen.echo_share),
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


# The scope sizes `scopes` cuts our sets' scopes to, and how many draws it makes of each.
SCOPE_SIZES = (3, 5, 10, 20, 50, 100, 200, 500)
SCOPE_DRAWS = 10


def scopes(chosen: Weighing) -> None:
    """How `Weighing.least_for` was read off (engine/weighing.py, `LEAST_AT_ONE`): our sets' scopes cut to each of
    `SCOPE_SIZES` entries, each request's own entries kept and the rest drawn at random, and the general questions
    asked of as many drawn at random; by the model's similarities alone, the share of requests none of whose
    scope is as like them as a least (they would get nothing), and the share of general questions silenced, at
    `chosen`'s least for that size (`least_for`) and at its `least` itself."""
    least = chosen.least
    model = corpus.local_model()
    general = corpus.encode(model, json.loads(OFF_TOPIC.read_text())["questions"])
    draw = np.random.default_rng(7)
    header = f"{'entries':>7} {'least':>6} {'requests left with nothing':>27} {'general questions silent':>25}"
    print(f"{header}  (at {least})")
    # Each set's entries and requests, embedded once for every size.
    embedded = []
    for labelled in (LabelledSet.load(name) for name in SET_NAMES):
        entries = [entry for store in labelled.stores for entry in store["entries"]]
        vectors = corpus.encode(model, [entry["content"] for entry in entries])
        requests = corpus.encode(model, [q["query"] for q in labelled.queries])
        embedded.append((labelled, entries, vectors, requests))
    for size in SCOPE_SIZES:
        asked: list[float] = []
        unasked: list[float] = []
        for labelled, entries, vectors, requests in embedded:
            position = {entry["id"]: n for n, entry in enumerate(entries)}
            for _ in range(SCOPE_DRAWS):
                for request, item in zip(requests, labelled.queries, strict=True):
                    own = [position[entry] for entry in item["relevant"]]
                    others = np.setdiff1d(np.arange(len(entries)), own)
                    drawn = draw.choice(others, size=max(0, min(len(others), size - len(own))), replace=False)
                    asked.append(float((vectors[[*own, *drawn]] @ request).max()))
                for question in general:
                    drawn = draw.choice(len(entries), size=size, replace=False)
                    unasked.append(float((vectors[drawn] @ question).max()))
        scaled = chosen.least_for(size)
        likest, general_likest = np.array(asked), np.array(unasked)
        print(
            f"{size:>7} {scaled:>6.3f} {np.mean(likest < scaled):>26.1%} {np.mean(general_likest < scaled):>24.1%}"
            f"  ({np.mean(likest < least):.1%}, {np.mean(general_likest < least):.1%})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the fit on all the data to {WEIGHTS_FILE.name}")
    parser.add_argument("--json", type=Path, default=RESULTS / "weighing.json")
    parser.add_argument(
        "--questions",
        type=Path,
        help="what the questions' candidates were, read from this file when it exists, else collected and saved there",
    )
    parser.add_argument("--scopes", action="store_true", help="how least_for was read off our sets' scopes, and stop")
    args = parser.parse_args()
    if args.scopes:
        scopes(Weighing.load())
        return
    if args.questions and args.questions.exists():
        questions = load(args.questions)
    else:
        questions = measure()
        if args.questions:
            save(questions, args.questions)
    table, final = cross_validated(questions)
    for row, cells in table.items():
        print(f"{row}: " + ", ".join(f"{name} {value:.3f}" for name, value in cells.items()))
    print("fit on all:", json.dumps({"weights": final.weights, "intercept": final.intercept}, default=float))
    print(
        f"gate: threshold {final.threshold}, unknown names {final.unknown_names}, floor {final.floor},"
        f" least {final.least}; echo share {final.echo_share}"
    )
    if args.write:
        write(final)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
