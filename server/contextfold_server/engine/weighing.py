"""The default ranking's learnt weighing: what each signal of a candidate is worth, and when none is
relevant enough to inject.

The signals are cheap, read from what the search fetched (engine/ranking.py has the crowds,
the words and the neighbours): the similarity, its lead over the store's crowd and over the
best candidate, the query's words held, a better neighbour or a better entry in the same
session, a date the question names, a speaker the question names, whether it states something
or only asks, a better turn just before it that asks what it answers, how specifically it
says which one (names, numbers, titles), how much nearer its best sentence is than itself
(an entry of several sentences has a vector for each: memory/sentences.py), and for an entry in no
session how few of the other candidates say much the same (small talk retells its topic; what a
request needs is often said once); for an entry in no
session, its neighbours are those its author (a user, an agent) wrote just before and after it,
weighed by signals of their own.
A candidate's score is the weighed sum of its signals; the silence gate weighs them as a
log-odds of relevance (a logistic fit), the order with those weights tuned for what the first
five hold. The weights and the silence threshold are plain numbers in `weighing.json`, fitted by
`bench/weighing.py` on LoCoMo's development conversations and our own labelled sets, and judged
there by cross-validation (fitted without a conversation or set, scored on it, in turn).

These are pure functions: the search gathers what they weigh.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np

# The signals a candidate is weighed by, in the order `weighing.json` lists their weights.
SIGNALS = (
    "similarity",
    "lead",
    "words",
    "neighbour",
    "behind_best",
    "date",
    "speaker",
    "session",
    "standing",
    "states",
    "answers",
    "written_neighbour",
    "written_answers",
    "specific",
    "sentence",
    "alone",
)
# What the order's weights are fitted over: `standing` (the similarity, twice its lead over the crowd and 1.5
# times the words' share: `ranking.with_words`) in place of its three parts. Fitted apart, the parts trade
# weights (a lead is a similarity less the crowd's), and the lone entry of a small store, which has no lead,
# would be ranked by what is left: nothing, when the similarity's weight comes out 0.
FITTED_SIGNALS = (
    "standing",
    "neighbour",
    "behind_best",
    "date",
    "speaker",
    "session",
    "states",
    "answers",
    "written_neighbour",
    "written_answers",
    "specific",
    "sentence",
    "alone",
)
# The signals the silence gate weighs (its weights are fitted apart from the order's, `weighing.json`).
GATE_SIGNALS = FITTED_SIGNALS
# A question-wide signal: the share of the names the question asks about that no entry in the scope holds.
UNKNOWN_NAMES = "unknown_names"
WEIGHTS_FILE = Path(__file__).with_name("weighing.json")
# The share of the question's words (as `words` weighs them) that keeps an entry above the gate's floor.
FLOOR_WORDS = 0.5
# How `least` scales with the scope (`Weighing.least_for`): the likest of a few entries a question is not about is
# less like it than the likest of hundreds. Read off our labelled sets' scopes cut to 3 to 500 entries (each request's
# own entries kept, the rest drawn at random; bench/weighing.py --scopes): at each size, about the least that leaves
# at most 2 % of the requests with nothing (0.15 at 3 to 10 entries, 0.2 at 50, 0.225 at 100, 0.25 at 500).
LEAST_AT_ONE = 0.125
LEAST_PER_TENFOLD = 0.05
# The share of two candidates' words together (Jaccard, `COMMON_WORDS` left out) they must hold in common for one to
# echo the other (`alone`), unless `weighing.json` says (`Weighing.echo_share`, chosen by bench/weighing.py among 0.2,
# 0.3 and 0.4 inside each fold of its cross-validation: docs/injection.md, "Said once or said again").
ECHO_SHARE = 0.2


@dataclass(frozen=True)
class Weighing:
    """The fitted numbers: a weight per signal and an intercept (a candidate's score, which orders the
    candidates, is their sum); and the silence gate, its own weights over `GATE_SIGNALS`: a candidate is
    injected only if its gate score, less `unknown_names` times the question's share of unknown names,
    reaches `threshold`, it is not under the floor (`under_floor`), and the question is like one of its
    candidates at least as much as `least` (`reaches_least`)."""

    weights: Mapping[str, float]
    intercept: float
    gate_weights: Mapping[str, float]
    gate_intercept: float
    threshold: float
    unknown_names: float
    # The least cosine similarity to the question an injected entry has (-1: any).
    floor: float = -1.0
    # The similarity to the question one of its candidates must reach for any to be injected (-1: none need): a
    # question no candidate is this like is about nothing in its scope ("What is 17 times 23?" asked of a team's
    # decisions), however well its candidates weigh on their own. In a scope of fewer entries, less (`least_for`).
    least: float = -1.0
    # The share of their words two candidates hold in common for one to echo the other (`alone`).
    echo_share: float = ECHO_SHARE

    @classmethod
    def load(cls, path: Path = WEIGHTS_FILE) -> Weighing:
        data = json.loads(path.read_text())
        gate = data["gate"]
        return cls(
            {name: float(data["weights"].get(name, 0.0)) for name in SIGNALS},
            float(data["intercept"]),
            {name: float(gate["weights"].get(name, 0.0)) for name in GATE_SIGNALS},
            float(gate["intercept"]),
            float(gate["threshold"]),
            float(gate["unknown_names"]),
            float(gate.get("floor", -1.0)),
            float(gate.get("least", -1.0)),
            float(data.get("echo_share", ECHO_SHARE)),
        )

    def contributions(self, signals: Mapping[str, float]) -> dict[str, float]:
        """What each signal adds to a candidate's score."""
        return {name: self.weights.get(name, 0.0) * value for name, value in signals.items()}

    def score(self, signals: Mapping[str, float]) -> float:
        return self.intercept + sum(weight * signals.get(name, 0.0) for name, weight in self._weighed)

    def gate_score(self, signals: Mapping[str, float]) -> float:
        return self.gate_intercept + sum(weight * signals.get(name, 0.0) for name, weight in self._gate_weighed)

    @functools.cached_property
    def _weighed(self) -> tuple[tuple[str, float], ...]:
        """The signals the order weighs, with their weights (a signal weighing 0 adds nothing to a sum)."""
        return tuple((name, weight) for name, weight in self.weights.items() if weight)

    @functools.cached_property
    def _gate_weighed(self) -> tuple[tuple[str, float], ...]:
        return tuple((name, weight) for name, weight in self.gate_weights.items() if weight)

    def relevant(self, gate_score: float, unknown_names: float) -> bool:
        """Whether a candidate of this gate score is relevant enough to inject, for a question whose
        names the scope holds none of in this share."""
        return gate_score - self.unknown_names * unknown_names >= self.threshold

    def under_floor(self, signals: Mapping[str, float]) -> bool:
        """Whether a candidate is too little like the question to inject, whatever it weighs: `unlike` it by
        the floor."""
        return unlike(signals, self.floor)

    def least_for(self, entries: int | None) -> float:
        """`least` for a scope of this many entries (None: not known, taken as large): `LEAST_AT_ONE` and
        `LEAST_PER_TENFOLD` for each tenfold, at most `least`."""
        if entries is None or self.least < 0:
            return self.least
        return min(self.least, LEAST_AT_ONE + LEAST_PER_TENFOLD * math.log10(max(entries, 1)))

    def reaches_least(self, signals: Mapping[str, float], entries: int | None = None) -> bool:
        """Whether a candidate is like the question enough (`least_for` a scope of `entries`; `unlike`'s
        exceptions too) that the question is about something in its scope."""
        return not unlike(signals, self.least_for(entries))


def unlike(signals: Mapping[str, float], similarity: float) -> bool:
    """Whether a candidate's similarity to the question is under `similarity`, unless it answers the turn before
    it (`answers`, `written_answers`: a reply such as "Luna and Oliver!" is like the question only through the
    turn it answers) or holds `FLOOR_WORDS` of the question's words (an entry naming who and what the question
    names is about it, whatever its embedding says)."""
    answering = signals.get("answers", 0.0) or signals.get("written_answers", 0.0)
    worded = signals.get("words", 0.0) >= FLOOR_WORDS
    return signals.get("similarity", 0.0) < similarity and not answering and not worded


@functools.cache
def default_weighing() -> Weighing:
    return Weighing.load()


# What the weighing reads of an entry (its `states`, how `specific` it is, its words for `near_copy`): its first
# 2,000 characters, so that a long entry costs the ranking, which runs on the event loop, no more than a short one
# (a question of 100 entries among as many long ones would otherwise take it for most of a second). The
# development data's longest entry is 444 characters.
ENTRY_READ = 2000
# The most of an entry the weighing reads: `ENTRY_READ` characters after a speaker's name and its colon (`specific`),
# which `_SPEAKER` allows up to 127 characters. A search reads no more of the candidates it weighs.
READ_MOST = ENTRY_READ + 127
# What the question's words look like, lower-cased, a possessive dropped ("Melanie's" asks about Melanie).
_WORD = re.compile(r"[^\W_][\w'\u2019-]*")
_POSSESSIVE = re.compile(r"['\u2019]s?$")
# A conversation turn written `Speaker: what they said` (one to three capitalised words before the colon).
_SPEAKER = re.compile(r"^([A-Z][\w'\u2019.-]{0,40}(?: [A-Z][\w'\u2019.-]{0,40}){0,2}):\s")
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
# Each weekday's name, with its number (Monday 0, as `date.weekday` has it).
_WEEKDAYS = {
    name: number
    for number, name in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
}
# Capitalised words that name nothing in particular: a sentence's own, pronouns, greetings.
_NOT_NAMES = {"i", "i'm", "i've", "i'd", "i'll", "ok", "hi", "hey", "please", "thanks"}
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_DAY_MONTH = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?\b", re.I)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+{_YEAR})?", re.I)
_ISO_DAY = re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")
# A month alone names a date only after a preposition ("in May"; "May I" does not) or before a year.
_MONTH_YEAR = re.compile(rf"\b{_MONTH}(?:\s+of)?,?\s+{_YEAR}\b", re.I)
_IN_MONTH = re.compile(rf"\b(?:in|during|since|by|of|through|until|early|late|mid)\s+{_MONTH}\b", re.I)
_IN_YEAR = re.compile(rf"\b(?:in|during|since|of|through|until)\s+{_YEAR}\b", re.I)


@dataclass(frozen=True)
class DateSpan:
    """A date a question names: a day (within a day either side, for time zones), a month or a year; a
    day or a month named with no year holds in any year."""

    year: int | None
    month: int | None = None
    day: int | None = None

    def holds(self, when: datetime) -> bool:
        if self.day is not None and self.month is not None:
            if self.year is None:
                return when.month == self.month and abs(when.day - self.day) <= 1
            return abs((when.date() - date(self.year, self.month, self.day)).days) <= 1
        if self.month is not None and when.month != self.month:
            return False
        return self.year is None or when.year == self.year


@dataclass(frozen=True)
class DateRange:
    """Days a question names by when it is asked ("yesterday", "last week", "three weeks ago"): from
    `first` to `last`, within a day either side (the question's day is taken in UTC, and the asker's
    may not be)."""

    first: date
    last: date

    def holds(self, when: datetime) -> bool:
        # Differences of days, which cannot pass the calendar's ends as a day before its first would.
        return (when.date() - self.first).days >= -1 and (when.date() - self.last).days <= 1


def question_dates(text: str, today: date | None = None) -> tuple[DateSpan | DateRange, ...]:
    """The dates `text` names, written out ("13 October 2023", "October 13", "2023-10-13", "in May
    2023", "in June", "in 2022"); the most precise reading of each part wins. Given `today`, the day it
    is asked, also those it names by it, in the past ("yesterday", "the day before yesterday", "five
    days ago", "two weeks ago", "a month ago", "last week", "last weekend", "last month", "last year",
    "last Friday"; `relative_dates`): an agent asks before each model call, so its conversation's day
    is the call's, unless the caller says when it was asked (a conversation replayed). Days ahead
    ("tomorrow", "next week") are not read: nothing was written then."""
    spans: list[DateSpan | DateRange] = []
    taken: list[tuple[int, int]] = []

    def add(found: re.Match[str], span: DateSpan | DateRange) -> None:
        if any(start < found.end() and found.start() < end for start, end in taken):
            return
        if isinstance(span, DateSpan) and span.day is not None and not _valid_day(span):
            return
        taken.append(found.span())
        spans.append(span)

    for found in _ISO_DAY.finditer(text):
        add(found, DateSpan(int(found[1]), int(found[2]), int(found[3])))
    for found in _DAY_MONTH.finditer(text):
        add(found, DateSpan(_year(found[3]), _MONTHS[found[2].lower()], int(found[1])))
    for found in _MONTH_DAY.finditer(text):
        add(found, DateSpan(_year(found[3]), _MONTHS[found[1].lower()], int(found[2])))
    for found in _MONTH_YEAR.finditer(text):
        add(found, DateSpan(int(found[2]), _MONTHS[found[1].lower()]))
    for found in _IN_MONTH.finditer(text):
        add(found, DateSpan(None, _MONTHS[found[1].lower()]))
    for found in _IN_YEAR.finditer(text):
        add(found, DateSpan(int(found[1])))
    if today is not None:
        for found, span in relative_dates(text, today):
            add(found, span)
    return tuple(spans)


# Counts a question may put before "days ago": digits, or words up to ten.
_COUNTS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "a couple of": 2, "a few": 3,
}  # fmt: skip
_COUNT = r"(\d{1,3}|" + "|".join(sorted(_COUNTS, key=len, reverse=True)) + ")"
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b", re.I)
_BEFORE_YESTERDAY = re.compile(r"\bthe\s+day\s+before\s+yesterday\b", re.I)
_YESTERDAY = re.compile(r"\byesterday\b", re.I)
_LAST = re.compile(r"\blast\s+(week|weekend|month|year|" + "|".join(_WEEKDAYS) + r")\b", re.I)


def relative_dates(text: str, today: date) -> list[tuple[re.Match[str], DateSpan | DateRange]]:
    """The past days `text` names by `today` (`question_dates`), each with where it says so, in the
    order it names them. A week is Monday to Sunday; "last Friday" is the Friday before today; "two
    weeks ago" is a week around that day; "a month ago" is that month, "a year ago" that year. A day
    before the calendar's first (a caller's `asked_time` in year 1) names nothing."""
    found: list[tuple[re.Match[str], DateSpan | DateRange]] = []
    for pattern in (_BEFORE_YESTERDAY, _YESTERDAY, _AGO, _LAST):
        for match in pattern.finditer(text):
            try:
                found.append((match, _named_by(match, pattern, today)))
            except OverflowError:
                continue
    return sorted(found, key=lambda named: named[0].start())


def _named_by(match: re.Match[str], pattern: re.Pattern[str], today: date) -> DateSpan | DateRange:
    """The days one of `relative_dates`' readings (`match`, of `pattern`) names by `today`."""

    def day(back: int) -> DateRange:
        return DateRange(today - timedelta(days=back), today - timedelta(days=back))

    def month(back: int) -> DateSpan:
        year, month = divmod(today.year * 12 + today.month - 1 - back, 12)
        return DateSpan(year, month + 1)

    if pattern is _BEFORE_YESTERDAY:
        return day(2)
    if pattern is _YESTERDAY:
        return day(1)
    if pattern is _AGO:
        count = int(match[1]) if match[1].isdigit() else _COUNTS[match[1].lower()]
        unit = match[2].lower()
        if unit == "day":
            return day(count)
        if unit == "week":
            middle = today - timedelta(weeks=count)
            return DateRange(middle - timedelta(days=3), middle + timedelta(days=3))
        if unit == "month":
            return month(count)
        return DateSpan(today.year - count)
    what = match[1].lower()
    if what == "week":
        monday = today - timedelta(days=today.weekday())
        return DateRange(monday - timedelta(days=7), monday - timedelta(days=1))
    if what == "weekend":
        sunday = today - timedelta(days=(today.weekday() - 6) % 7 or 7)
        return DateRange(sunday - timedelta(days=1), sunday)
    if what == "month":
        return month(1)
    if what == "year":
        return DateSpan(today.year - 1)
    return day((today.weekday() - _WEEKDAYS[what]) % 7 or 7)


def _year(text: str | None) -> int | None:
    return int(text) if text else None


def _valid_day(span: DateSpan) -> bool:
    try:
        date(span.year or 2000, span.month or 1, span.day or 1)
    except ValueError:
        return False
    return True


def on_a_date(spans: Sequence[DateSpan | DateRange], when: datetime | None) -> float:
    """1 when an entry written at `when` falls on a date the question names, else 0."""
    return 1.0 if when is not None and any(span.holds(when) for span in spans) else 0.0


@dataclass(frozen=True)
class Asked:
    """What the weighing reads in a question: its words (`question_words`), the dates it names
    (`question_dates`; those named by the day it is asked too, given `today`), the names it asks about
    (`names_in`)."""

    words: frozenset[str]
    dates: tuple[DateSpan | DateRange, ...]
    names: tuple[str, ...]
    parts: tuple[str, ...] = ()

    @classmethod
    def of(cls, text: str, today: date | None = None) -> Asked:
        return cls(question_words(text), question_dates(text, today), names_in(text), question_parts(text))


# Where a question asks a second thing: after a question mark, or at an "and" (a comma or semicolon before it
# or not) that a question word follows ("… boat, and where does Bo park?"). Only a question word: "and is his
# prized possession" continues the same question, and so do "and" between names or things.
_SECOND_QUESTION = re.compile(
    r"(?<=\?)\s+|[,;]?\s+and\s+(?=(?:what|where|when|who|whom|whose|which|why|how)\b)|;\s+(?=(?:what|where|when|who|whom"
    r"|whose|which|why|how)\b)",
    re.I,
)
# A part shorter than this in words asks nothing of its own ("Answer yes or no" is an instruction, and is
# longer; "and why?" is not a part).
_PART_WORDS = 3
# A question in more parts than this is a list, not a question: it is searched whole.
MOST_PARTS = 3


def question_parts(text: str) -> tuple[str, ...]:
    """The questions a question asks, when it asks more than one ("What is Ana's boat called, and where does
    Bo park?": two), each to be searched for itself; () when it asks one, or more than `MOST_PARTS`. A
    part is split at a question mark followed by more, or at "and" (or ";") before a question word, and
    counts when it holds `_PART_WORDS` words and a question word or ends in a question mark."""
    pieces = [piece.strip(" ,;") for piece in _SECOND_QUESTION.split(text.strip())]
    parts = tuple(
        piece
        for piece in pieces
        if len(_WORD.findall(piece)) >= _PART_WORDS and (piece.endswith("?") or _QUESTION_WORD.search(piece))
    )
    return parts if 2 <= len(parts) <= MOST_PARTS else ()


_QUESTION_WORD = re.compile(r"\b(?:what|where|when|who|whom|whose|which|why|how)\b", re.I)


def entry_date(metadata: Mapping[str, object], create_time: datetime | None) -> datetime | None:
    """When an entry says it happened: its metadata's `date` (ISO 8601, a day or a time), else when it
    was written (`create_time`). A conversation stored after the fact keeps each session's date there."""
    stated = metadata.get("date")
    if isinstance(stated, str):
        try:
            return datetime.fromisoformat(stated.strip())
        except ValueError:
            pass
    return create_time


def question_words(text: str) -> frozenset[str]:
    """The question's words, lower-cased, possessives dropped."""
    return frozenset(_POSSESSIVE.sub("", word.lower()) for word in _WORD.findall(text))


def speaker_named(content: str, words: frozenset[str]) -> float:
    """1 when the entry is a turn written `Speaker: …` whose speaker (any word of the name) the
    question names, else 0: "What did Melanie read?" asks about Melanie's turns."""
    return Reading.of(content).speaker_named(words)


def speakers(readings: Iterable[Reading]) -> frozenset[str]:
    """The words of the speakers' names of the turns read (`Reading.speaker`: `Speaker: …`, lower-cased): the
    people of a conversation, whose names say nothing about which of its turns answers."""
    return frozenset(part for reading in readings for part in reading.speaker)


def _speaker(content: str) -> tuple[str, ...]:
    """The words of the name of the speaker of a turn written `Speaker: …`, lower-cased; () for none."""
    found = _SPEAKER.match(content)
    return tuple(part.lower() for part in found[1].split()) if found else ()


# Titles in quotes: "Dune", “The Alchemist”.
_QUOTED = re.compile(r"\"[^\"\n]{2,60}\"|\u201c[^\u201d\n]{2,60}\u201d")
# The words that may say which one: those beginning with a digit or a capital (or a letter beyond ASCII's,
# checked after), read in one pass.
_MAY_NAME = re.compile(r"(?<!\w)[^\W_a-z][\w'\u2019-]*")
# A word that begins a sentence (or follows an opening bracket or a colon) is capitalised whatever it is.
_OPENS = ".!?[(:"
# The words that say which one, counted up to this many (the signal is their share of it), in what the weighing
# reads of an entry (`ENTRY_READ`). Chosen among 2, 3, 4 and 6 by bench/weighing.py's cross-validation
# (docs/injection.md, "The default's weighing").
SPECIFIC_MOST = 6


def specific(content: str, people: frozenset[str]) -> float:
    """How specifically an entry says which one: its numbers, capitalised words that do not begin a sentence
    (a name, a title, a place; not `I`, nor one of `people`, the conversation's speakers, `speakers`) and
    titles in quotes, up to `SPECIFIC_MOST`, as a share of that. Asked which books someone read, "I'm
    reading \"Dune\" by Frank Herbert" answers; "I'm reading a great book" only says there was one."""
    return Reading.of(content).specific(people)


@dataclass(frozen=True)
class Reading:
    """What the weighing reads in an entry's text whatever it is asked, read once for an entry weighed often
    (the search keeps them by entry and version): the share of its sentences that state (`states`), the words of
    its speaker's name (`Speaker: …`, lower-cased), what may say which one: its numbers and titles in quotes
    (`marks`), and its capitalised words that do not begin a sentence, each with how often it appears (`names`:
    possessives dropped, lower-cased, not `I` nor a greeting), which count unless they are one of the
    conversation's speakers (`specific`); and the words that say what it is about (`topic`, for `alone`), read
    from what the weighing reads of its text (`read`) the first time they are asked for: only a question with a
    candidate in no session weighs them."""

    states: float
    speaker: tuple[str, ...]
    marks: int
    names: tuple[tuple[str, int], ...]
    read: str = field(default="", repr=False, compare=False)

    @functools.cached_property
    def topic(self) -> np.ndarray:
        """`topic_words` of the entry's text."""
        return topic_words(self.read)

    @classmethod
    def of(cls, content: str) -> Reading:
        found = _SPEAKER.match(content)
        start = found.end() if found else 0
        body = content[start : start + ENTRY_READ]
        marks = len(_QUOTED.findall(body)) if '"' in body or "\u201c" in body else 0
        names: dict[str, int] = {}
        for word in _MAY_NAME.finditer(body):
            text = word.group()
            if text[0].isdigit():
                marks += 1
            elif text[0].isupper() and not _begins_sentence(body, word.start()):
                bare = _POSSESSIVE.sub("", text).lower()
                if bare not in _NOT_NAMES:
                    names[bare] = names.get(bare, 0) + 1
        return cls(states(content), _speaker(content), marks, tuple(names.items()), content[:ENTRY_READ])

    def specific(self, people: frozenset[str]) -> float:
        """`specific`: the marks and the names none of `people` holds, up to `SPECIFIC_MOST`, as a share of it."""
        count = self.marks + sum(times for name, times in self.names if name not in people)
        return min(count, SPECIFIC_MOST) / SPECIFIC_MOST

    def speaker_named(self, words: frozenset[str]) -> float:
        """`speaker_named`: 1 when the question's `words` name its speaker."""
        return 1.0 if any(part in words for part in self.speaker) else 0.0


def _begins_sentence(text: str, start: int) -> bool:
    """Whether the word at `start` begins `text` or a sentence of it (`_OPENS` before it, spaces apart)."""
    at = start - 1
    while at >= 0 and text[at].isspace():
        at -= 1
    return at < 0 or text[at] in _OPENS


# Where one sentence ends and the next begins: after its closing mark (and any closing quote or bracket).
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]\u201d]*\s+")


# The most sentences of an entry that get a vector of their own (`entry_sentences`), from the first: a LoCoMo turn has
# 4.2 on average, and what the weighing reads of an entry (`ENTRY_READ`) about 25 at most.
MOST_SENTENCES = 16


def entry_sentences(content: str) -> list[str]:
    """The sentences of an entry that are embedded each on its own (`memory/sentences.py`): those of what the
    weighing reads of it (`ENTRY_READ`), split where `states` splits them, up to `MOST_SENTENCES`, each after a
    turn's `Speaker: ` as the turn is written; [] for an entry of one sentence, whose own vector is its sentence's.
    A turn often says several things ("Thanks! It was tough, but I'm doing ok. Been reading that book you
    recommended"), and its one vector is near none of them."""
    found = _SPEAKER.match(content)
    start = found.end() if found else 0
    parts = [part for part in SENTENCE_END.split(content[start : start + ENTRY_READ].strip()) if part.strip()]
    if len(parts) < 2:
        return []
    speaker = content[:start]
    return [speaker + part for part in parts[:MOST_SENTENCES]]


def states(content: str) -> float:
    """The share of an entry's sentences that state something rather than ask: a turn that only asks
    ("What are their names?") holds no answer, however near it is to the question; the reply that follows
    it does. 1 for an entry without a question (most entries: read without splitting them). Read in what the
    weighing reads of an entry (`ENTRY_READ`)."""
    content = content[:ENTRY_READ]
    if "?" not in content:
        return 1.0
    sentences = [part for part in SENTENCE_END.split(content.strip()) if part.strip()]
    if not sentences:
        return 1.0
    asking = sum(1 for sentence in sentences if sentence.rstrip(" \"')]\u201d").endswith("?"))
    return 1.0 - asking / len(sentences)


def names_in(text: str) -> tuple[str, ...]:
    """The names a question asks about: its capitalised words of letters that do not begin a sentence
    (nor are a pronoun, a month or a weekday, nor written in capitals: `AWS`, `UI` and their plurals,
    `URLs`, are terms, and ids are the words' to find), possessives dropped, each once."""
    names: dict[str, None] = {}
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text):
        for position, word in enumerate(_WORD.findall(sentence)):
            bare = _POSSESSIVE.sub("", word)
            lowered = bare.lower()
            if position == 0 or not bare[:1].isupper() or lowered in _NOT_NAMES:
                continue
            if not bare.isalpha() or len(bare) < 2 or bare.removesuffix("s").isupper():
                continue
            if lowered in _MONTHS or lowered in _WEEKDAYS:
                continue
            names.setdefault(bare, None)
    return tuple(names)


def near_copy(content: str, better: Iterable[str], threshold: float = 0.9) -> bool:
    """Whether `content` says what one of `better` says: their words (lower-cased) overlap by at least
    `threshold` of both together (Jaccard). A near-copy adds nothing the model does not already have."""
    return words_copy(content_words(content), map(content_words, better), threshold)


def content_words(content: str) -> frozenset[str]:
    """The words of what the weighing reads of a text (`ENTRY_READ`), lower-cased, as `near_copy` compares
    them: read once for a text compared often."""
    return frozenset(_WORD.findall(content[:ENTRY_READ].lower()))


def words_copy(words: frozenset[str], better: Iterable[frozenset[str]], threshold: float = 0.9) -> bool:
    """`near_copy` of texts already read into their words (`content_words`). Two sets overlap by `threshold`
    of both together only if the smaller holds that share of the larger's count: others are not compared. Two
    that are compared share at least `threshold / (1 + threshold)` of their words' count together, so `words`
    may miss at most the rest of its own in `theirs`: its words are looked up one by one until more are missing
    than that (most pairs, after a tenth of them); a pair still in the running has its overlap from the count."""
    if not words:
        return False
    size = len(words)
    for theirs in better:
        if theirs and min(size, len(theirs)) / max(size, len(theirs)) >= threshold:
            # The words of `words` a copy may lack, rounded up a hair: a rounding error can only let a pair on.
            may_miss = size - threshold * (size + len(theirs)) / (1 + threshold) + 1e-6
            missed = 0
            for word in words:
                if word not in theirs:
                    missed += 1
                    if missed > may_miss:
                        break
            else:
                shared = size - missed
                if shared / (size + len(theirs) - shared) >= threshold:
                    return True
    return False


class NearCopies:
    """Texts kept one by one, by their words (`content_words`), each new one checked against those kept for
    a near-copy (`words_copy`) without comparing it with every one. Two sets whose overlap is `threshold` of
    both together share a word among the first `len - ceil(threshold * len) + 1` of each, in any one order of
    all words (the prefix filter of set-similarity joins): only kept texts sharing such a word with it are
    compared. A hundred long entries kept made 5,000 comparisons of hundreds of words each; most now make none."""

    def __init__(self, threshold: float = 0.9) -> None:
        self._threshold = threshold
        self._kept: list[frozenset[str]] = []
        # The kept texts (their positions) whose first words hold each word.
        self._first: dict[str, list[int]] = {}

    def copy_of(self, words: frozenset[str]) -> int | None:
        """The position of the first kept text `words` is a near-copy of; None when it is none's, and then it is
        kept."""
        first = self._first_words(words)
        sharing = sorted({kept for word in first for kept in self._first.get(word, ())})
        copied = next((kept for kept in sharing if words_copy(words, [self._kept[kept]], self._threshold)), None)
        if copied is None:
            for word in first:
                self._first.setdefault(word, []).append(len(self._kept))
            self._kept.append(words)
        return copied

    def _first_words(self, words: frozenset[str]) -> list[str]:
        """The words a near-copy of `words` must share one of with it, in the order of their hashes. The overlap
        needed is rounded down a hair, so that a rounding error can only make the prefix longer."""
        if not words:
            return []
        needed = math.ceil(self._threshold * len(words) - 1e-9)
        return heapq.nsmallest(len(words) - needed + 1, words, key=hash)


# Words too common to say what a text is about (English's commonest function words), left out of those `alone`
# compares.
_COMMON = """
    a an the and or but if of to in on at for with by from as is are was were be been being do does did have has
    had what which who whom whose when where why how that this these those it its i you he she we they me my your his
    her our their him them us not no so than too very can could would should will shall may might must about into
    over after before during"""
COMMON_WORDS = frozenset(_COMMON.split())
# The echoes `alone` counts: an entry echoed by this many candidates or more is as little alone as can be.
ECHOES_MOST = 3
# The candidates an entry's echoes are counted among (`alone`): the best this many by their standing before the
# weighing (`ranking.with_words`). A LoCoMo question has 60 to 100 candidates; a question of 100 entries among long
# ones, 500, and their comparison grows with their count, not its square.
ECHOES_AMONG = 64


def topic_words(content: str) -> np.ndarray:
    """The words of what the weighing reads of a text (`content_words`) that may say what it is about, all but
    `COMMON_WORDS`: each by its hash (this process's), sorted, so that the entries' readings kept (`Reading`) hold a
    few bytes a word, and `alone` finds a word among others by a search of an array."""
    # Sorted by Python, not `np.unique`: a turn's twenty-odd words in 8.6 µs against 11.8.
    return np.array(sorted({hash(word) for word in content_words(content) - COMMON_WORDS}), dtype=np.int64)


def alone(topics: Sequence[np.ndarray], share: float = ECHO_SHARE, among: int = ECHOES_AMONG) -> list[float]:
    """For each candidate (its `topic_words`, in `topics`, best first), how few of the others echo it, sharing `share`
    or more of their words together: 1 when none does, 0 when `ECHOES_MOST` or more do, in even steps between. The
    echoes are counted among the first `among`. Small talk repeats its topic ("the train station has a new café",
    mentioned over three coffees), and a question near it finds every repetition; the preference a request needs
    is usually said once.

    The overlaps are one product of two candidates-by-words matrices, over the words of the first `among` (no
    other word is shared with one of them), on one thread (the server's BLAS library runs on one: its package's
    `__init__`): a LoCoMo question's 60 to 100 candidates take about 0.3 ms. It grows with the candidates, not their
    square, and with what the weighing reads of each (`ENTRY_READ`)."""
    count = len(topics)
    if count < 2:
        return [1.0] * count
    sizes = np.array([len(words) for words in topics])
    columns = np.unique(np.concatenate(topics[:among]))
    every = np.concatenate(topics)
    rows = np.repeat(np.arange(count), sizes)
    at = np.minimum(np.searchsorted(columns, every), max(len(columns) - 1, 0))
    held_at = (columns[at] == every) if len(columns) else np.zeros(len(every), dtype=bool)
    held = np.zeros((count, max(len(columns), 1)), dtype=np.float32)
    held[rows[held_at], at[held_at]] = 1.0
    first = held[:among]
    common = held @ first.T
    together = sizes[:, None] + sizes[None, : len(first)] - common
    # A hair under the share: a rounding error can only count an echo at the share exactly.
    echoes = (common >= share * together - 1e-4) & (together > 0)
    np.fill_diagonal(echoes, False)
    counted = np.minimum(echoes.sum(axis=1), ECHOES_MOST)
    return [1.0 - float(n) / ECHOES_MOST for n in counted]
