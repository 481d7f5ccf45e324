"""`Inject` beyond the reference: cross-store ranking, dedup across turns, scopes, and the options."""

from __future__ import annotations

import pytest
from contextfold import Client, InvalidArgument
from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc
from contextfold_server.engine.weighing import SIGNALS
from google.protobuf.timestamp_pb2 import Timestamp

from harness.messages import assistant, unique, user


def test_results_are_ranked_across_stores_by_similarity_not_store_order(client: Client, make_store) -> None:
    first = make_store("weak")
    second = make_store("strong")
    client.add_memories(first, ["The office plants are watered on Mondays", "Quarterly reports are due in March"])
    client.add_memories(second, ["User's favourite programming language is Rust"])

    result = client.inject(
        [user("Which programming language do I like best?")], stores=[first, second], ranking="similarity"
    )

    stores = [entry.store for entry in result.report.entries]
    assert stores[0] == second, "the best match leads even though its store was named second"
    scores = [entry.score for entry in result.report.entries]
    assert scores == sorted(scores, reverse=True)
    text = result.messages[0]["content"][-1]["injected"]["text"]
    assert text.startswith(
        f'\n\n<memory>\n<entry source="{second}">User\'s favourite programming language is Rust</entry>\n'
    )


def test_max_entries_caps_the_block_and_defaults_to_five(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, [f"Fact number {n} about the user's garden" for n in range(8)])
    conversation = [user("Tell me about my garden")]

    assert len(client.inject(conversation, stores=[store]).report.entries) == 5
    assert len(client.inject(conversation, stores=[store], max_entries=2).report.entries) == 2
    disabled = client.inject(conversation, stores=[store], max_entries=0)
    assert not disabled.injected
    assert disabled.report.skip_reason == injection_pb2.SKIP_REASON_DISABLED
    assert disabled.messages == conversation


def test_over_turns_no_entry_is_injected_twice_and_each_turn_gets_at_most_one_block(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, [f"The user's cat is called {name}" for name in ("Miso", "Tofu", "Natto", "Udon")])
    conversation: list[dict] = []
    results = []
    for turn in range(3):
        conversation.append(user(f"Remind me about my cats, part {turn}"))
        result = client.inject(conversation, stores=[store], max_entries=2)
        results.append(result)
        conversation = [*result.messages]
        blocks = [block for block in conversation[-1]["content"] if "injected" in block]
        assert len(blocks) == (1 if result.injected else 0)
        conversation.append(assistant("Noted."))

    seen = [entry.id for result in results for entry in result.report.entries]
    assert [result.injected for result in results] == [True, True, False]
    assert len(seen) == 4 and len(set(seen)) == 4, "two new cats per turn until none are left"
    assert results[2].report.skip_reason == injection_pb2.SKIP_REASON_NO_ENTRIES
    # A retried call for a turn that already carries its block adds nothing.
    retried = client.inject(results[0].messages, stores=[store], max_entries=2)
    assert retried.report.skip_reason == injection_pb2.SKIP_REASON_ALREADY_INJECTED
    assert retried.messages == results[0].messages


def test_an_entry_comes_back_once_the_agent_drops_its_block(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, ["The user's dog is called Biscuit"])
    first = client.inject([user("What is my dog called?")], stores=[store])
    assert first.injected

    kept = [*first.messages, assistant("Biscuit."), user("And my dog's name again?")]
    assert client.inject(kept, stores=[store]).report.skip_reason == injection_pb2.SKIP_REASON_NO_ENTRIES

    dropped = [user("What is my dog called?"), assistant("Biscuit."), user("And my dog's name again?")]
    again = client.inject(dropped, stores=[store])
    assert again.injected
    assert [entry.id for entry in again.report.entries] == [entry.id for entry in first.report.entries]


def test_a_block_that_names_no_entries_leaves_out_those_whose_content_it_shows(client: Client, make_store) -> None:
    """A client that kept only the text it was shown (a plain HTTP client, through the mesh) still gets
    new entries only: an entry counts as written when its content appears in such a block."""
    store = make_store()
    cats = [f"The user's cat is called {name} & loves <boxes>" for name in ("Miso", "Tofu", "Natto")]
    client.add_memories(store, cats)
    first = client.inject([user("What are my cats called?")], stores=[store], max_entries=2)
    shown = first.messages[0]["content"][-1]["injected"]
    kept = {"injected": {"source": "memory", "text": shown["text"], "entryIds": []}}
    again = [
        {"role": "user", "content": [{"text": "What are my cats called?"}, kept]},
        assistant("Two of them."),
        user("What are my cats called, all of them?"),
    ]
    second = client.inject(again, stores=[store], max_entries=2)
    assert second.injected
    firsts, seconds = {e.id for e in first.report.entries}, {e.id for e in second.report.entries}
    assert len(firsts) == 2 and seconds and not firsts & seconds, "the escaped contents were recognised"


def test_injected_text_never_feeds_the_adaptive_query(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, ["The user's bicycle is red"])
    first = client.inject([user("What colour is my bicycle?")], stores=[store])
    # An every-turn call on a tool-result turn searches with the latest assistant text;
    # the user message above holds the injected block, which must not leak in.
    conversation = [
        *first.messages,
        {
            "role": "assistant",
            "content": [
                {"text": "  Checking the garage.  "},
                {"toolUse": {"toolUseId": "a", "name": "garage", "input": {}}},
            ],
        },
        {"role": "user", "content": [{"toolResult": {"toolUseId": "a", "content": [{"text": "ok"}]}}]},
    ]
    result = client.inject(conversation, stores=[store], trigger="every_turn")
    assert result.report.query == "Checking the garage."
    only_user = client.inject([*first.messages], stores=[store], trigger="every_turn")
    assert only_user.report.skip_reason == injection_pb2.SKIP_REASON_ALREADY_INJECTED


def test_scope_limits_injection_to_the_matching_user(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(
        store,
        [
            {"content": "Alice is allergic to peanuts", "user_id": "alice"},
            {"content": "Bob is allergic to shellfish", "user_id": "bob"},
        ],
    )
    result = client.inject([user("What am I allergic to?")], stores=[store], scope={"user_id": "alice"})
    text = result.messages[0]["content"][-1]["injected"]["text"]
    assert "Alice" in text and "Bob" not in text
    nobody = client.inject([user("What am I allergic to?")], stores=[store], scope={"user_id": "carol"})
    assert nobody.report.skip_reason == injection_pb2.SKIP_REASON_NO_ENTRIES
    assert nobody.messages == [user("What am I allergic to?")]


def test_explicit_query_min_score_and_caller_vector(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, ["The user's passport expires in 2031", "The user enjoys jazz"])
    conversation = [user("hello")]

    explicit = client.inject(conversation, stores=[store], query="When does my passport expire?", max_entries=1)
    assert explicit.report.query == "When does my passport expire?"
    assert "passport" in explicit.messages[0]["content"][-1]["injected"]["text"]

    strict = client.inject(conversation, stores=[store], query="passport expiry date", min_score=0.99)
    assert strict.report.skip_reason == injection_pb2.SKIP_REASON_NO_ENTRIES

    (match,) = client.search_memories("passport", stores=[store], max_results=1)
    vector = client.search_memories("When does my passport expire?", stores=[store], max_results=1)
    assert vector[0].memory.id == match.memory.id


def test_every_block_and_message_not_folded_into_comes_back_byte_identical(server, client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, ["The user writes poetry"])
    request = injection_pb2.InjectRequest(
        messages=[
            conversation_pb2.Message(
                role=conversation_pb2.ROLE_ASSISTANT,
                content=[
                    conversation_pb2.ContentBlock(raw_json='{"cachePoint": {"type": "default"},   "x": [1, 2.50]}'),
                    conversation_pb2.ContentBlock(
                        tool_use=conversation_pb2.ToolUseBlock(tool_use_id="u", name="n", input_json='{ "b":1,"a":2 }')
                    ),
                    conversation_pb2.ContentBlock(reasoning=conversation_pb2.ReasoningBlock(text="hmm", signature="s")),
                ],
                metadata_json='{"z": 1, "a": 2}',
            ),
            conversation_pb2.Message(
                role=conversation_pb2.ROLE_USER,
                content=[
                    conversation_pb2.ContentBlock(
                        document=conversation_pb2.DocumentBlock(format="pdf", name="d", data=b"\x00\xff")
                    ),
                    conversation_pb2.ContentBlock(text="Write me a poem"),
                ],
                metadata_json='{"k":"v"}',
            ),
        ],
        memory=injection_pb2.MemoryOptions(stores=[store]),
    )
    import grpc

    with grpc.insecure_channel(server.address) as channel:
        response = injection_pb2_grpc.InjectionServiceStub(channel).Inject(request, timeout=30)

    assert response.report.injected
    assert response.messages[0].SerializeToString() == request.messages[0].SerializeToString()
    target = response.messages[1]
    assert target.metadata_json == '{"k":"v"}'
    assert [block.SerializeToString() for block in target.content[:2]] == [
        block.SerializeToString() for block in request.messages[1].content
    ]
    assert target.content[2].WhichOneof("block") == "injected"
    assert target.content[2].injected.source == "memory"


@pytest.mark.parametrize(
    ("messages", "options", "field"),
    [
        ([{"role": "user", "content": [{"text": "x"}]}], {"max_entries": -1}, "memory.max_entries"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"max_entries": 101}, "memory.max_entries"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"min_score": 1.5}, "memory.min_score"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"query_vector": [float("nan")]}, "memory.query_vector"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"stores": [" padded "]}, "memory.stores[0]"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"app_state": {"n": float("inf")}}, "app_state.n"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"app_state": {"k": "a\x00b"}}, "app_state.k"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"query": "q" * 16_385}, "memory.query"),
        ([{"role": "user", "content": [{"text": "x"}]}], {"agent": {"id": "line\nbreak"}}, "agent.id"),
        (
            [{"role": "user", "content": [{"text": "x"}]}],
            {"asked_time": Timestamp(seconds=253_402_300_800)},  # the first second of year 10000
            "memory.asked_time",
        ),
    ],
)
def test_bad_inject_requests_name_the_field(client: Client, messages, options, field) -> None:
    with pytest.raises(InvalidArgument) as raised:
        client.inject(messages, **options)
    assert [violation[0] for violation in raised.value.field_violations] == [field]


def test_a_message_without_a_role_or_an_empty_block_is_invalid(server) -> None:
    import grpc

    request = injection_pb2.InjectRequest(
        messages=[
            conversation_pb2.Message(content=[conversation_pb2.ContentBlock(text="hi")]),
            conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[conversation_pb2.ContentBlock()]),
        ]
    )
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as raised:
        injection_pb2_grpc.InjectionServiceStub(channel).Inject(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[0].role" in raised.value.details()
    assert "messages[1].content[0]" in raised.value.details()


def test_a_missing_store_skips_injection_with_the_reason(client: Client) -> None:
    conversation = [user("anything")]
    result = client.inject(conversation, stores=["no-such-store"])
    assert result.messages == conversation
    assert result.report.skip_reason == injection_pb2.SKIP_REASON_FAILED
    assert result.report.detail == "store 'no-such-store' does not exist"


def test_a_store_that_cannot_be_searched_leaves_only_itself_out(client: Client, make_store) -> None:
    kept = make_store("kept")
    other_dimension = make_store("small", dimension=3)
    client.add_memories(kept, [{"id": unique("tea"), "content": "The user drinks green tea"}])
    client.add_memories(other_dimension, [{"content": "three numbers", "vector": [1.0, 0.0, 0.0]}])

    result = client.inject([user("What do I drink?")], stores=["gone-store", kept, other_dimension])

    assert result.injected and [entry.store for entry in result.report.entries] == [kept]
    assert result.report.skip_reason == injection_pb2.SKIP_REASON_UNSPECIFIED
    assert result.report.detail == (
        f"store 'gone-store' does not exist; store {other_dimension!r} was left out:"
        f" the query vector has 384 dimensions; store {other_dimension!r} has 3"
    )


def test_folded_messages_too_large_for_a_response_come_back_untouched(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, [{"content": f"{n} " + "fact " * 3000, "vector": [1.0, n] * 192} for n in range(20)])
    # Nearly a whole request of conversation: with twenty long entries folded in, past 4 MiB.
    conversation = [user("x" * (4 * 1024 * 1024 - 64 * 1024))]

    result = client.inject(conversation, stores=[store], query_vector=[1.0, 0.0] * 192, max_entries=20, timeout=60)

    assert result.messages == conversation
    assert not result.injected
    assert result.report.skip_reason == injection_pb2.SKIP_REASON_OVER_BUDGET
    assert "4194304 bytes of a response" in result.report.detail


# Explained


VERDICT = injection_pb2.CandidateVerdict


def verdicts(result) -> dict[str, int]:
    return {candidate.id: candidate.verdict for candidate in result.report.candidates}


def test_explained_the_report_weighs_every_candidate_and_says_which_were_injected(client: Client, make_store) -> None:
    store = make_store()
    added = client.add_memories(store, [f"The user's bicycle number {n} is painted {c}" for n, c in enumerate("RGBY")])
    conversation = [user("What colour is my bicycle painted?")]

    plain = client.inject(conversation, stores=[store], max_entries=2)
    assert not plain.report.candidates, "only when asked"
    result = client.inject(conversation, stores=[store], max_entries=2, explain=True)

    candidates = list(result.report.candidates)
    assert {c.id for c in candidates} == {m.id for m in added}
    assert [c.rank for c in candidates] == [1, 2, 3, 4]
    assert [c.score for c in candidates] == sorted((c.score for c in candidates), reverse=True)
    injected = [c.id for c in candidates if c.verdict == VERDICT.CANDIDATE_VERDICT_INJECTED]
    assert injected == [entry.id for entry in result.report.entries] == [c.id for c in candidates[:2]]
    assert [c.verdict for c in candidates[2:]] == [VERDICT.CANDIDATE_VERDICT_RANKED_BELOW] * 2
    assert all(c.detail.startswith(f"ranked {c.rank}, after the") for c in candidates[2:])
    for candidate in candidates:
        # The default ranking's score is what each signal added, with the intercept; each signal's value too.
        assert set(candidate.signals) == {*SIGNALS, "intercept"}
        assert set(candidate.inputs) == {*SIGNALS, "unknown_names"}
        assert candidate.inputs["similarity"] == pytest.approx(candidate.similarity, abs=1e-6)
        assert candidate.score == pytest.approx(sum(candidate.signals.values()), abs=1e-4)
        assert candidate.store == store and candidate.content.startswith("The user's bicycle")
    assert result.messages == client.inject(conversation, stores=[store], max_entries=2).messages, "the same fold"


def test_explained_a_candidate_left_out_says_why_min_score_conversation_or_budget(client: Client, make_store) -> None:
    store = make_store()
    near, far = client.add_memories(store, ["The user's violin was made in Cremona", "Invoices are filed quarterly"])
    asked = [user("Where was my violin made?")]

    picky = client.inject(asked, stores=[store], ranking="similarity", min_score=0.4, explain=True)
    assert verdicts(picky) == {
        near.id: VERDICT.CANDIDATE_VERDICT_INJECTED,
        far.id: VERDICT.CANDIDATE_VERDICT_BELOW_MIN_SCORE,
    }
    assert dict(picky.report.candidates[0].signals) == {}, "similarity adds no signal"

    later = [*picky.messages, assistant("Cremona."), user("And my violin?")]
    again = client.inject(later, stores=[store], explain=True)
    by_id = {c.id: c for c in again.report.candidates}
    assert by_id[near.id].verdict == VERDICT.CANDIDATE_VERDICT_IN_CONVERSATION and by_id[near.id].rank == 0
    assert by_id[near.id].detail == "injected in an earlier turn"

    one_entry = client.inject(asked, stores=[store], max_entries=1).report.sources[0].tokens
    # A min_score in place of the silence gate, which would leave the invoices out as not relevant first.
    tight = client.inject(asked, stores=[store], memory_max_tokens=one_entry, explain=True, min_score=-1.0)
    assert [e.id for e in tight.report.entries] == [near.id]
    assert verdicts(tight) == {
        near.id: VERDICT.CANDIDATE_VERDICT_INJECTED,
        far.id: VERDICT.CANDIDATE_VERDICT_OVER_BUDGET,
    }
    nothing_fits = client.inject(asked, stores=[store], memory_max_tokens=2, explain=True, min_score=-1.0)
    assert set(verdicts(nothing_fits).values()) == {VERDICT.CANDIDATE_VERDICT_OVER_BUDGET}
    assert {c.detail for c in nothing_fits.report.candidates} == {nothing_fits.report.detail}
