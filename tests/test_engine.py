"""The injection engine on its own: the reference's rules, with no server in the way."""

from __future__ import annotations

import asyncio

from contextfold_server.engine.conversation import InjectedRef, Role, Turn, injected_entry_ids, is_user_turn
from contextfold_server.engine.entries import RetrievedEntry, rank_across_stores
from contextfold_server.engine.fold import fold_target, separated, shows_text
from contextfold_server.engine.format import escape_xml_attr, escape_xml_text, format_memory_block
from contextfold_server.engine.gate import SkipReason
from contextfold_server.engine.injection import InjectionRequest, ProviderSpec, inject
from contextfold_server.engine.memory import MemoryRequest, SearchQuery, SearchResult
from contextfold_server.engine.query import adaptive_query
from contextfold_server.engine.trigger import Trigger, should_inject

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
    assert [e.id for e in rank_across_stores(entries, 2)] == ["b", "c"]


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


async def count_words(text: str) -> int:
    return len(text.split())


def run(turns, search, request: InjectionRequest | None = None, provide=no_providers):
    return asyncio.run(inject(turns, request or InjectionRequest(), search, provide, count_words, NoCustomizations()))


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
