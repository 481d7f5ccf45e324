"""The injection engine on its own: the reference's rules, with no server in the way."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from datetime import UTC, date, datetime

import pytest
from contextfold_server.engine import ranking, weighing
from contextfold_server.engine.conversation import InjectedRef, Role, Turn, injected_entry_ids, is_user_turn
from contextfold_server.engine.entries import RetrievedEntry
from contextfold_server.engine.fold import fold_target, separated, shows_text
from contextfold_server.engine.format import escape_xml_attr, escape_xml_text, format_memory_block
from contextfold_server.engine.gate import Gate, Skipped, SkipReason, admit
from contextfold_server.engine.injection import InjectionRequest, ProviderSpec, inject
from contextfold_server.engine.memory import (
    MemoryRequest,
    SearchQuery,
    SearchResult,
    is_shown,
    shown_together,
)
from contextfold_server.engine.query import adaptive_query
from contextfold_server.engine.ranking import by_similarity
from contextfold_server.engine.trigger import Trigger, should_inject
from contextfold_server.tokens import count_tokens

USER, ASSISTANT = Role.USER, Role.ASSISTANT


def test_a_user_turn_is_a_last_user_message_without_tool_results() -> None:
    assert is_user_turn([Turn(USER, ("hi",))])
    assert not is_user_turn([])
    assert not is_user_turn([Turn(USER, (), has_tool_result=True)])
    assert not is_user_turn([Turn(USER, ("hi",)), Turn(ASSISTANT, ("yo",))])
    assert should_inject(Trigger.EVERY_TURN, [])


def test_the_adaptive_query_follows_the_turn() -> None:
    assert adaptive_query([Turn(USER, ("  a", "b  "))]) == "a\nb"
    tool_turn = [Turn(USER, ("ask",)), Turn(ASSISTANT, ("  step  ",)), Turn(USER, (), has_tool_result=True)]
    assert adaptive_query(tool_turn) == "step"
    assert adaptive_query([Turn(USER, (" ",))]) is None
    assert adaptive_query([Turn(USER, (), has_tool_result=True)]) is None


def test_escaping_covers_text_and_attributes_ampersand_first() -> None:
    assert escape_xml_text("&lt;a & <b>") == "&amp;lt;a &amp; &lt;b&gt;"
    assert escape_xml_attr("\"'&<>") == "&quot;&#39;&amp;&lt;&gt;"


def test_the_default_format_is_the_reference_block() -> None:
    entries = [RetrievedEntry("1", "prefs", "dark </entry> mode", 0.9), RetrievedEntry("2", "", "no store", 0.8)]
    assert format_memory_block(entries) == (
        '<memory>\n<entry source="prefs">dark &lt;/entry&gt; mode</entry>\n<entry>no store</entry>\n</memory>'
    )


def test_the_fold_targets_the_latest_user_message_with_the_separator_only_after_text() -> None:
    conversation = [
        Turn(USER, ("a",)),
        Turn(ASSISTANT, ("b",)),
        Turn(USER, (), has_tool_result=True),
        Turn(ASSISTANT, ()),
    ]
    assert fold_target(conversation) == 2
    assert not shows_text(conversation[2])
    assert shows_text(Turn(USER, ("",)))
    assert shows_text(Turn(USER, (), injected=(InjectedRef("clock", ()),)))
    assert separated("x", follows_text=True) == "\n\nx"
    assert separated("\nx", follows_text=True) == "\nx"
    assert separated("x", follows_text=False) == "x"
    assert fold_target([Turn(ASSISTANT, ("a",))]) == -1


def test_ranking_is_by_score_across_stores_stable_on_ties() -> None:
    entries = [
        RetrievedEntry("a", "s1", "", 0.1),
        RetrievedEntry("b", "s2", "", 0.9),
        RetrievedEntry("c", "s1", "", 0.9),
    ]
    assert [e.id for e in by_similarity(entries, 2)] == ["b", "c"]


def test_only_the_source_own_blocks_count_as_already_injected() -> None:
    turns = [Turn(USER, ("q",), injected=(InjectedRef("memory", ("m1",)), InjectedRef("clock", ("c1",))))]
    assert injected_entry_ids(turns, "memory") == {"m1"}


async def no_providers(spec: ProviderSpec, timeout: float) -> str:
    raise AssertionError("no provider is registered")


class NoCustomizations:
    """These requests carry no expression or template, so nothing may reach for one."""

    async def trigger(self, expression: str) -> bool:
        raise AssertionError("no trigger expression was given")

    async def query(self, expression: str) -> str:
        raise AssertionError("no query expression was given")

    async def render(self, template: str, entries) -> str:
        raise AssertionError("no template was given")


async def tokens(text: str) -> int:
    return count_tokens(text)


def run(turns, search, request: InjectionRequest | None = None, provide=no_providers, customizer=None):
    return asyncio.run(
        inject(turns, request or InjectionRequest(), search, provide, tokens, customizer or NoCustomizations())
    )


def test_a_failing_search_skips_with_the_reason_and_no_fold() -> None:
    async def broken(query: SearchQuery) -> SearchResult:
        raise ConnectionError("store offline")

    outcome = run([Turn(USER, ("q",))], broken)
    assert outcome.blocks == []
    assert outcome.memory.skip_reason is SkipReason.FAILED
    assert outcome.memory.detail == "ConnectionError: store offline"
    assert "total" in outcome.durations


def test_the_search_is_asked_to_exclude_what_the_conversation_already_shows() -> None:
    asked: list[SearchQuery] = []

    async def search(query: SearchQuery) -> SearchResult:
        asked.append(query)
        return SearchResult([RetrievedEntry("m1", "s", "old", 0.9), RetrievedEntry("m2", "s", "new", 0.5)])

    turns = [
        Turn(USER, ("first",), injected=(InjectedRef("memory", ("m1",)),)),
        Turn(ASSISTANT, ("ok",)),
        Turn(USER, ("second",)),
    ]
    outcome = run(turns, search, InjectionRequest(memory=MemoryRequest(max_entries=3)))
    assert asked[0].exclude_ids == {"m1"} and asked[0].limit == 3 and asked[0].text == "second"
    (block,) = outcome.blocks
    assert block.entry_ids == ("m2",), "an entry the search returns anyway is still left out"
    assert block.text == '\n\n<memory>\n<entry source="s">new</entry>\n</memory>'


def test_a_coalesced_block_counts_for_dedup_of_every_source_it_holds() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult([RetrievedEntry("m1", "s", "old", 0.9)])

    coalesced = InjectedRef("coalesced", ("m1",), ("memory", "clock"))
    turns = [Turn(USER, ("first",), injected=(coalesced,)), Turn(ASSISTANT, ("ok",)), Turn(USER, ("again",))]
    outcome = run(turns, search)
    assert outcome.memory.skip_reason is SkipReason.NO_ENTRIES


# The gate: one decision, for memory and providers alike


class Triggers:
    """A customizer whose trigger expressions return what `fires` says, recording each it ran."""

    def __init__(self, fires: bool) -> None:
        self.fires = fires
        self.ran: list[str] = []

    async def trigger(self, expression: str) -> bool:
        self.ran.append(expression)
        return self.fires

    async def query(self, expression: str) -> str:
        raise AssertionError("no query expression was given")

    async def render(self, template: str, entries) -> str:
        raise AssertionError("no template was given")


def gate(turns, gate: Gate, target: int | None = None, customizer=None) -> tuple[SkipReason, str] | None:
    target = fold_target(turns) if target is None else target
    try:
        asyncio.run(admit(gate, turns, target, customizer or NoCustomizations()))
    except Skipped as skipped:
        return skipped.reason, skipped.detail
    return None


TOOL_TURN = [Turn(USER, ("go",)), Turn(ASSISTANT, ()), Turn(USER, (), has_tool_result=True)]


def test_the_gate_lets_a_source_through_only_when_on_triggered_and_not_yet_injected() -> None:
    ask = [Turn(USER, ("ask",))]
    assert gate(ask, Gate("clock")) is None
    assert gate(ask, Gate("clock", off="it is disabled")) == (SkipReason.DISABLED, "it is disabled")
    assert gate(TOOL_TURN, Gate("clock")) == (SkipReason.NOT_TRIGGERED, "the last message is not a fresh user ask")
    assert gate(TOOL_TURN, Gate("clock", Trigger.EVERY_TURN)) is None
    assert gate([Turn(ASSISTANT, ("step",))], Gate("clock", Trigger.EVERY_TURN)) == (
        SkipReason.NO_USER_MESSAGE,
        "the conversation has no user message to fold into",
    )
    shown = [Turn(USER, ("ask",), injected=(InjectedRef("clock", ()),))]
    assert gate(shown, Gate("clock")) == (SkipReason.ALREADY_INJECTED, "message 0 already carries its block")
    assert gate(shown, Gate("sandbox")) is None, "only the source's own block counts"


def test_a_trigger_expression_replaces_the_named_trigger_and_runs_only_when_the_source_is_on() -> None:
    fires, stays_quiet = Triggers(True), Triggers(False)
    assert gate(TOOL_TURN, Gate("clock", trigger_expression="x"), customizer=fires) is None
    assert gate([Turn(USER, ("ask",))], Gate("clock", trigger_expression="x"), customizer=stays_quiet) == (
        SkipReason.NOT_TRIGGERED,
        "its trigger expression returned false",
    )
    off = Triggers(True)
    assert gate([Turn(USER, ("ask",))], Gate("clock", trigger_expression="x", off="off"), customizer=off)[0] is (
        SkipReason.DISABLED
    )
    assert off.ran == [], "a source that is off costs no expression"


def test_memory_and_providers_pass_the_same_gate_in_one_call() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult([RetrievedEntry("m1", "s", "fact", 0.9)])

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        return f"<{spec.name}/>"

    providers = (
        ProviderSpec("every", Trigger.EVERY_TURN, order=1),
        ProviderSpec("user", order=2),
        ProviderSpec("off", Trigger.EVERY_TURN, order=3, enabled=False),
    )
    outcome = run(TOOL_TURN, search, InjectionRequest(providers=providers), provide)
    reasons = {source.source: source.skip_reason for source in outcome.sources}
    assert reasons == {
        "memory": SkipReason.NOT_TRIGGERED,
        "every": None,
        "user": SkipReason.NOT_TRIGGERED,
        "off": SkipReason.DISABLED,
    }
    assert [(block.source, block.text) for block in outcome.blocks] == [("every", "<every/>")]
    assert outcome.target_index == 2

    retried = [*TOOL_TURN[:2], Turn(USER, (), True, (InjectedRef("every", ()),))]
    again = run(retried, search, InjectionRequest(providers=providers), provide)
    assert again.blocks == []
    assert again.sources[1].skip_reason is SkipReason.ALREADY_INJECTED


def test_memory_off_is_disabled_and_asks_nothing() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        raise AssertionError("memory is off")

    outcome = run([Turn(USER, ("q",))], search, InjectionRequest(memory=MemoryRequest(max_entries=0)))
    assert (outcome.memory.skip_reason, outcome.memory.detail) == (SkipReason.DISABLED, "memory.max_entries is 0")


def test_a_source_given_no_time_is_not_asked() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        raise AssertionError("no time was left to search")

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        raise AssertionError("no time was left to ask")

    request = InjectionRequest(providers=(ProviderSpec("clock"),), budget=0.0)
    outcome = run([Turn(USER, ("q",))], search, request, provide)
    assert {(s.source, s.skip_reason, s.detail) for s in outcome.sources} == {
        ("memory", SkipReason.TIMEOUT, "no time was left before the caller's deadline"),
        ("clock", SkipReason.TIMEOUT, "no time was left before the caller's deadline"),
    }


def test_a_slow_provider_is_left_out_at_its_timeout_and_the_rest_fold() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult([RetrievedEntry("m1", "s", "fact", 0.9)])

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        if spec.name == "slow":
            await asyncio.Event().wait()
        return "<fast/>"

    providers = (ProviderSpec("slow", timeout=0.05, order=1), ProviderSpec("fast", order=2))
    outcome = run([Turn(USER, ("q",))], search, InjectionRequest(providers=providers), provide)
    slow = outcome.sources[1]
    assert (slow.source, slow.skip_reason, slow.detail) == ("slow", SkipReason.TIMEOUT, "no answer within 0.050s")
    assert [block.source for block in outcome.blocks] == ["memory", "fast"]


# The region: order and budget, exactly

MEMORY_3 = (
    "<memory>\n"
    '<entry source="kb">alpha fact</entry>\n'
    '<entry source="kb">beta fact</entry>\n'
    '<entry source="kb">gamma fact</entry>\n'
    "</memory>"
)
MEMORY_2 = '<memory>\n<entry source="kb">alpha fact</entry>\n<entry source="kb">beta fact</entry>\n</memory>'
MEMORY_1 = '<memory>\n<entry source="kb">alpha fact</entry>\n</memory>'
HI, TIE, LO, CAPPED = "<hi/>", "<tie/>", "<lo/>", "<capped/>"


def sep(text: str) -> str:
    return "\n\n" + text


def n(text: str) -> int:
    return count_tokens(text)


REGION_CASES = [
    (
        "by priority, memory first on a tie",
        {},
        [("hi", sep(HI)), ("memory", sep(MEMORY_3)), ("tie", sep(TIE)), ("lo", sep(LO))],
    ),
    (
        "coalesced into one block",
        {"coalesce": True},
        [("coalesced", sep("\n\n".join([HI, MEMORY_3, TIE, LO])))],
    ),
    (
        "over the request budget the lowest priority goes first",
        {"max_tokens": n(sep(HI)) + n(sep(MEMORY_3)) + n(sep(TIE))},
        [("hi", sep(HI)), ("memory", sep(MEMORY_3)), ("tie", sep(TIE))],
    ),
    (
        "then memory yields its lowest-ranked entries, whole",
        {"max_tokens": n(sep(HI)) + n(sep(MEMORY_2)) + 1},
        [("hi", sep(HI)), ("memory", sep(MEMORY_2))],
    ),
    (
        "memory with a higher priority is cut last",
        {"memory_priority": 10, "max_tokens": n(sep(MEMORY_3)) + n(sep(HI))},
        [("memory", sep(MEMORY_3)), ("hi", sep(HI))],
    ),
    (
        "memory's own cap keeps its best entries",
        {"memory_max_tokens": n(MEMORY_1)},
        [("hi", sep(HI)), ("memory", sep(MEMORY_1)), ("tie", sep(TIE)), ("lo", sep(LO))],
    ),
]


@pytest.mark.parametrize(("case", "options", "expected"), REGION_CASES, ids=[case[0] for case in REGION_CASES])
def test_order_and_budget_fold_exactly(case, options, expected) -> None:
    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult(
            [
                RetrievedEntry(f"m{i}", "kb", text, 0.9 - i / 10)
                for i, text in enumerate(["alpha fact", "beta fact", "gamma fact"])
            ]
        )

    texts = {"hi": HI, "tie": TIE, "lo": LO, "capped": CAPPED}

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        return texts[spec.name]

    providers = (
        ProviderSpec("lo", priority=-5, order=1),
        ProviderSpec("tie", order=2),
        ProviderSpec("hi", priority=5, order=3),
        ProviderSpec("capped", priority=9, order=4, max_tokens=n(CAPPED) - 1),
    )
    memory = MemoryRequest(priority=options.get("memory_priority", 0), max_tokens=options.get("memory_max_tokens", 0))
    request = InjectionRequest(
        memory=memory,
        providers=providers,
        max_tokens=options.get("max_tokens", 0),
        coalesce=options.get("coalesce", False),
    )

    outcome = run([Turn(USER, ("question",))], search, request, provide)

    assert [(block.source, block.text) for block in outcome.blocks] == expected
    reasons = {source.source: (source.skip_reason, source.detail) for source in outcome.sources}
    assert reasons["capped"] == (SkipReason.OVER_BUDGET, f"its text is over its own cap of {n(CAPPED) - 1} tokens")
    kept = {"hi", "memory", "tie", "lo"} if options.get("coalesce") else {source for source, _ in expected}
    for name in ("hi", "tie", "lo"):
        assert reasons[name][0] is (None if name in kept else SkipReason.OVER_BUDGET)
    assert outcome.total_tokens == sum(n(block.text) for block in outcome.blocks)
    assert "max_tokens" not in options or outcome.total_tokens <= options["max_tokens"]
    folded = [source for source in outcome.sources if source.injected]
    assert all(source.tokens > 0 for source in folded)


def test_a_provider_whose_text_is_blank_or_whose_rendering_fails_is_left_out_alone() -> None:
    class BrokenTemplate(NoCustomizations):
        async def render(self, template: str, entries) -> str:
            raise ValueError("no such filter")

    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult([RetrievedEntry("m1", "s", "fact", 0.9)])

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        return {"blank": "  \n ", "clock": "<now/>"}[spec.name]

    request = InjectionRequest(
        memory=MemoryRequest(format_template="{{ entries | nope }}"),
        providers=(ProviderSpec("blank", order=1), ProviderSpec("clock", order=2)),
    )
    outcome = run([Turn(USER, ("q",))], search, request, provide, BrokenTemplate())
    reasons = {source.source: (source.skip_reason, source.detail) for source in outcome.sources}
    assert reasons == {
        "memory": (SkipReason.FAILED, "ValueError: no such filter"),
        "blank": (SkipReason.EMPTY_TEXT, "the provider returned no text"),
        "clock": (None, ""),
    }
    assert [(block.source, block.text) for block in outcome.blocks] == [("clock", "\n\n<now/>")]


def test_with_no_text_in_the_target_the_first_block_has_no_separator_and_the_next_ones_do() -> None:
    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult([RetrievedEntry("m1", "s", "fact", 0.9)])

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        return "<now/>"

    request = InjectionRequest(
        memory=MemoryRequest(trigger=Trigger.EVERY_TURN, query="q"),
        providers=(ProviderSpec("clock", Trigger.EVERY_TURN),),
    )
    outcome = run(TOOL_TURN, search, request, provide)
    assert [block.text for block in outcome.blocks] == [
        '<memory>\n<entry source="s">fact</entry>\n</memory>',
        "\n\n<now/>",
    ]


def test_a_budget_renders_memory_a_handful_of_times_not_once_per_entry() -> None:
    entries = [RetrievedEntry(f"m{i}", "kb", f"fact number {i} about the user's garden", 0.9) for i in range(100)]

    async def search(query: SearchQuery) -> SearchResult:
        return SearchResult(entries)

    class CountingRenders(NoCustomizations):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        async def render(self, template: str, shown) -> str:
            self.sizes.append(len(shown))
            return "\n".join(entry.content for entry in shown)

    renders = CountingRenders()
    budget = count_tokens("\n\n" + "\n".join(entry.content for entry in entries[:37]))
    request = InjectionRequest(memory=MemoryRequest(max_entries=100, format_template="t"), max_tokens=budget)
    outcome = run([Turn(USER, ("q",))], search, request, customizer=renders)

    assert [len(block.entry_ids) for block in outcome.blocks] == [37]
    assert outcome.total_tokens <= budget
    assert len(renders.sizes) <= 10, renders.sizes


def test_an_entry_found_by_its_words_is_judged_against_its_store_crowd() -> None:
    crowd = [RetrievedEntry(f"n{i}", "notes", "", 0.5 - i * 0.01) for i in range(10)]
    worded = RetrievedEntry("w", "notes", "", 0.45)
    scores = ranking.stand_out_scores(crowd, [worded])
    eighth = crowd[ranking.CROWD_RANK].score
    assert scores["w"] == 0.45 + ranking.STAND_OUT_WEIGHT * (0.45 - eighth)
    # In a store the nearest have nothing of, an entry is its own crowd.
    assert ranking.stand_out_scores(crowd, [RetrievedEntry("x", "other", "", 0.3)])["x"] == 0.3


def test_the_share_of_the_query_words_an_entry_holds_adds_to_its_score() -> None:
    scores = ranking.with_words({"a": 1.0, "b": 1.2}, {"a": 0.5})
    assert scores == {"a": 1.0 + ranking.WORD_WEIGHT * 0.5, "b": 1.2}


def test_an_entry_s_session_best_is_the_best_score_among_its_session_s_entries() -> None:
    scores = {"question": 2.0, "reply": 1.0, "aside": 0.4, "alone": 0.9}
    sessions = {"question": "s1", "reply": "s1", "aside": "s2", "alone": None}
    assert ranking.best_in_session(scores, sessions) == {"question": 2.0, "reply": 2.0, "aside": 0.4}


def test_a_question_s_dates_names_and_an_entry_s_speaker_are_read_as_written() -> None:
    asked = weighing.Asked.of("What did Melanie's kids paint on 13 October, 2023? And Jon in May 2022?")
    assert asked.names == ("Melanie", "Jon")
    assert {(d.year, d.month, d.day) for d in asked.dates} == {(2023, 10, 13), (2022, 5, None)}
    assert weighing.on_a_date(asked.dates, datetime(2023, 10, 14, tzinfo=UTC)) == 1.0, "a day either side"
    assert weighing.on_a_date(asked.dates, datetime(2023, 10, 16, tzinfo=UTC)) == 0.0
    assert weighing.on_a_date(asked.dates, datetime(2022, 5, 30, tzinfo=UTC)) == 1.0
    assert weighing.question_dates("May I ask what we did in June?") == (weighing.DateSpan(None, 6),)
    assert weighing.names_in("Ask Priya about INC-2291 on AWS.") == ("Priya",), "ids and capitals are terms"
    assert weighing.names_in("Can we put Ana's ids in URLs, or in APIs?") == ("Ana",), "and their plurals"
    assert weighing.speaker_named("Melanie: we went camping", asked.words) == 1.0
    assert weighing.speaker_named("Caroline: we went camping", asked.words) == 0.0
    assert weighing.speaker_named("we went camping, Melanie said", asked.words) == 0.0
    stated = weighing.entry_date({"date": "2023-10-13"}, datetime(2026, 1, 1, tzinfo=UTC))
    assert stated is not None and stated.date() == date(2023, 10, 13)


def test_a_question_s_days_named_by_when_it_is_asked_are_read_against_that_day() -> None:
    friday = date(2026, 12, 4)

    def days(text: str) -> list[tuple[date, date] | tuple[int | None, int | None, int | None]]:
        return [
            (d.first, d.last) if isinstance(d, weighing.DateRange) else (d.year, d.month, d.day)
            for d in weighing.question_dates(text, friday)
        ]

    assert days("What did we decide yesterday?") == [(date(2026, 12, 3), date(2026, 12, 3))]
    assert days("And the day before yesterday?") == [(date(2026, 12, 2), date(2026, 12, 2))]
    assert days("What did I say five days ago, and 12 days ago?") == [
        (date(2026, 11, 29), date(2026, 11, 29)),
        (date(2026, 11, 22), date(2026, 11, 22)),
    ]
    assert days("What came up two weeks ago?") == [(date(2026, 11, 17), date(2026, 11, 23))], "a week around it"
    assert days("What did we plan last week?") == [(date(2026, 11, 23), date(2026, 11, 29))], "Monday to Sunday"
    assert days("Where did we go last weekend?") == [(date(2026, 11, 28), date(2026, 11, 29))]
    assert days("What did Ana say last Friday?") == [(date(2026, 11, 27), date(2026, 11, 27))], "not today"
    assert days("What did Ana say last Thursday?") == [(date(2026, 12, 3), date(2026, 12, 3))]
    assert days("What happened a month ago?") == [(2026, 11, None)]
    assert days("What did we spend last month, and three months ago?") == [(2026, 11, None), (2026, 9, None)]
    assert days("Where did we travel last year?") == [(2025, None, None)]
    assert days("What is on tomorrow, and next week?") == [], "days ahead: nothing was written then"
    assert weighing.question_dates("What did we decide yesterday?") == (), "not read without the day asked"
    yesterday = weighing.question_dates("What did we decide yesterday?", friday)
    assert weighing.on_a_date(yesterday, datetime(2026, 12, 2, 22, tzinfo=UTC)) == 1.0, "a day either side"
    assert weighing.on_a_date(yesterday, datetime(2026, 12, 1, tzinfo=UTC)) == 0.0


def test_days_named_by_a_question_asked_at_the_calendar_s_ends_are_read_without_error() -> None:
    """A caller's `asked_time` may be any time a Timestamp holds: a day before the calendar's first names
    nothing, and the days either side of the last are weighed without passing its end."""
    first = date(1, 1, 3)
    assert weighing.question_dates("What happened 12 days ago, or yesterday?", first) == (
        weighing.DateRange(date(1, 1, 2), date(1, 1, 2)),
    )
    assert weighing.question_dates("What did we decide three weeks ago?", first) == ()
    last = date(9999, 12, 31)
    yesterday = weighing.question_dates("What did we decide yesterday?", last)
    assert weighing.on_a_date(yesterday, datetime(9999, 12, 31, 23, tzinfo=UTC)) == 1.0
    assert weighing.question_dates("What did we decide yesterday?", date(1, 1, 1)) == ()
    assert weighing.on_a_date((weighing.DateRange(date(1, 1, 1), date(1, 1, 1)),), datetime(1, 1, 2, tzinfo=UTC)) == 1.0


def test_a_near_copy_is_one_whose_words_mostly_are_another_s() -> None:
    assert weighing.near_copy("The user prefers a window seat!", ["the user prefers a window seat"])
    assert not weighing.near_copy("The user prefers an aisle seat", ["The user prefers a window seat"])


def test_near_copies_are_told_by_their_words_overlap_whatever_their_sizes() -> None:
    """Sets of words too unlike in size to overlap by the threshold are not compared: the verdict is the
    overlap's (Jaccard) all the same, at the threshold's edge too."""
    chosen = random.Random(43)
    for _ in range(3000):
        mine = frozenset(chosen.sample(range(40), chosen.randint(1, 30)))
        theirs = frozenset(chosen.sample(range(40), chosen.randint(0, 30)))
        threshold = chosen.choice((0.5, 0.8, 0.9, 0.9, 1.0))
        overlap = bool(theirs) and len(mine & theirs) / len(mine | theirs) >= threshold
        assert weighing.words_copy(mine, [theirs], threshold) == overlap, (sorted(mine), sorted(theirs))
    # Long texts near the threshold, where a pair is given up once more of its words are missing than a copy lacks.
    for _ in range(500):
        base = frozenset(chosen.sample(range(2000), chosen.randint(200, 400)))
        mine = frozenset(w for w in base if chosen.random() > chosen.random() * 0.12) | frozenset(
            chosen.sample(range(2000, 2100), chosen.randint(0, 20))
        )
        theirs = frozenset(w for w in base if chosen.random() > chosen.random() * 0.12)
        overlap = len(mine & theirs) / len(mine | theirs) >= 0.9
        assert weighing.words_copy(mine, [theirs]) == overlap, (len(mine), len(theirs), len(mine & theirs))
    nine_of_ten = frozenset(range(9))
    assert weighing.words_copy(nine_of_ten, [frozenset(range(10))]) and not weighing.words_copy(
        frozenset(range(8)), [frozenset(range(10))]
    )
    # At the edge with a word missing: ten words against the nine they hold, 0.9 together.
    assert weighing.words_copy(frozenset(range(10)), [nine_of_ten])
    assert not weighing.words_copy(frozenset(range(11)), [frozenset(range(9)) | {20}])


def test_near_copies_found_by_their_first_words_are_those_every_comparison_finds() -> None:
    """`NearCopies` compares a text only with kept ones sharing one of its first words: each verdict, and the
    kept text it names, is the one comparing it with every kept text in turn gives, at the threshold's edge too."""
    chosen = random.Random(44)
    for _ in range(400):
        threshold = chosen.choice((0.5, 0.8, 0.9, 0.9, 1.0))
        copies, kept = weighing.NearCopies(threshold), []
        for _ in range(30):
            base = kept[chosen.randrange(len(kept))] if kept and chosen.random() < 0.6 else frozenset()
            words = frozenset(w for w in base if chosen.random() < 0.95) | frozenset(
                f"w{chosen.randrange(60)}" for _ in range(chosen.randint(0, 25))
            )
            first = next((i for i, theirs in enumerate(kept) if weighing.words_copy(words, [theirs], threshold)), None)
            assert copies.copy_of(words) == first, (threshold, sorted(words))
            if first is None:
                kept.append(words)


def test_an_entry_shown_by_a_block_s_text_alone_is_found_in_any_block_but_never_across_two() -> None:
    """The blocks shown by their text alone are looked through as one text (`shown_together`), however many and
    however old: an entry is found in any of them, as written or as the default format escapes it, and never in
    the end of one block and the start of the next."""
    old = "<memory>\n<entry>The user flies economy.</entry>\n</memory>"
    filler = ["<memory>\n<entry>" + "x" * 1000 + "</entry>\n</memory>"] * 200
    latest = "<memory>\n<entry>The user likes tea &amp; cake.</entry>\n</memory>"
    shown = shown_together([old, *filler, latest])
    assert is_shown("The user flies economy.", shown), "in the oldest of 202 blocks"
    assert is_shown("The user likes tea & cake.", shown), "as the default format escapes it"
    assert not is_shown("The user likes coffee.", shown)
    assert not is_shown("</memory><memory>", shown_together([latest, latest])), "across two blocks"
    assert shown_together([]) == ""


def test_the_weighing_reads_a_long_entry_s_beginning_only() -> None:
    """A long entry costs the ranking what its first `ENTRY_READ` characters do: what comes after them is
    not read, by the near-copy rule nor by the signals."""
    head = " ".join(f"word{n}" for n in range(400))
    assert len(head) > weighing.ENTRY_READ
    mine, theirs = (" ".join(f"{tail}{n}" for n in range(200)) for tail in ("mine", "theirs"))
    assert weighing.near_copy(f"{head} {mine}", [f"{head} {theirs}"]), "the two differ past what is read"
    assert weighing.states(head + ". Is it? Was it? Why?") == 1.0
    assert weighing.states("Is it? " + head) == 0.5
    assert weighing.specific(head + " Paris Rome Oslo 1 2 3", frozenset()) == 0.0
    assert weighing.specific("Paris Rome Oslo 1 2 3 " + head, frozenset()) == 5 / 6


def test_the_silence_gate_weighs_the_question_s_unknown_names() -> None:
    gate = weighing.Weighing({"standing": 1.0}, 0.0, {"standing": 2.0}, 0.0, threshold=0.5, unknown_names=2.0)
    assert gate.score({"standing": 0.8}) == 0.8 and gate.gate_score({"standing": 0.8}) == 1.6
    assert gate.relevant(1.6, unknown_names=0.0) and not gate.relevant(1.6, unknown_names=1.0)
    floored = dataclasses.replace(gate, floor=0.2)
    assert not floored.under_floor({"similarity": 0.2}) and floored.under_floor({"similarity": 0.19})
    assert not floored.under_floor({"similarity": 0.05, "answers": 0.1}), "a reply is judged by what it answers"
    assert not floored.under_floor({"similarity": 0.05, "written_answers": 0.1})
    assert not floored.under_floor({"similarity": 0.05, "words": 0.5}), "it holds half the question's words"
    assert floored.under_floor({"similarity": 0.05, "words": 0.4})
    assert not gate.under_floor({"similarity": -0.5}), "no floor: -1"
    # The question's own floor: one candidate at least this like it, or held to it by the same exceptions.
    least = dataclasses.replace(gate, least=0.25)
    assert least.reaches_least({"similarity": 0.25}) and not least.reaches_least({"similarity": 0.24})
    assert least.reaches_least({"similarity": 0.05, "answers": 0.1})
    assert least.reaches_least({"similarity": 0.05, "words": 0.5}) and not least.reaches_least({"words": 0.4})
    assert gate.reaches_least({"similarity": -0.5}), "no least: -1"
    # A scope of fewer entries asks less of its likest: 0.125 and 0.05 for each tenfold, at most `least`.
    assert least.least_for(None) == 0.25 and least.least_for(100_000) == 0.25
    assert least.least_for(10) == pytest.approx(0.175) and least.least_for(1) == pytest.approx(0.125)
    assert least.reaches_least({"similarity": 0.2}, entries=10) and not least.reaches_least({"similarity": 0.2})
    assert gate.least_for(3) == -1.0
    shipped = weighing.default_weighing()
    assert set(shipped.weights) == set(weighing.SIGNALS) and all(w >= 0 for w in shipped.weights.values())
