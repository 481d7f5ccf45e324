"""Remember: a conversation's turns become memories once, injected context never does; with an
extractor (a fake chat endpoint, harness/stand_ins/chat.py), facts are added, correct what is kept, or change
nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contextfold import Client, InvalidArgument, NotFound, Unavailable
from contextfold.v1 import memory_pb2

from harness.messages import assistant, unique, user
from harness.servers import ServerProcess, serving
from harness.stand_ins.chat import FakeChat

ADDED, UPDATED = memory_pb2.RememberedMemory.ACTION_ADDED, memory_pb2.RememberedMemory.ACTION_UPDATED


def injected(text: str, ids: list[str]) -> dict:
    return {"injected": {"source": "memory", "text": text, "entryIds": ids}}


def test_remember_keeps_the_users_turns_and_never_injected_context(client: Client, make_store) -> None:
    store = make_store()
    region = '<memory>\n<entry source="prefs">Prefers tea</entry>\n</memory>'
    conversation = [
        user("I am planning a trip to Japan in April."),
        assistant("Great! Cherry blossoms peak then."),
        {"role": "user", "content": [injected(region, ["t1"]), {"text": "Book me a ryokan in Kyoto."}]},
        # A client that shows injected blocks as text, and keeps both: the copy is not the user's words.
        {"role": "user", "content": [{"text": region}, {"text": "My budget is 200 dollars a night."}]},
        # The shipped reference folds its context as a text block of the user's message.
        {"role": "user", "content": [{"text": "What about Osaka?"}, {"text": "\n\n" + region}]},
    ]
    done = client.remember(store, conversation, scope={"user_id": "kai"})

    contents = [m.memory.content for m in done.memories]
    assert contents == [
        "I am planning a trip to Japan in April.",
        "Book me a ryokan in Kyoto.",
        "My budget is 200 dollars a night.",
        "What about Osaka?",
    ]
    assert all(m.action == ADDED and m.memory.user_id == "kai" for m in done.memories)
    assert (done.remembered_turn_count, done.skipped_turn_count) == (4, 0)
    assert not any("Prefers tea" in m.content for m in client.list_memories(store))


def test_a_turn_is_remembered_once_even_after_its_memory_is_deleted(client: Client, make_store) -> None:
    store = make_store()
    conversation = [user("My dog is called Biscuit."), assistant("Lovely name!")]
    first = client.remember(store, conversation)
    (memory,) = [m.memory for m in first.memories]

    conversation += [user("She is three years old.")]
    second = client.remember(store, conversation)
    assert [m.memory.content for m in second.memories] == ["She is three years old."]
    assert (second.remembered_turn_count, second.skipped_turn_count) == (1, 1)

    client.delete_memories([memory.id])
    third = client.remember(store, conversation)
    assert (list(third.memories), third.remembered_turn_count, third.skipped_turn_count) == ([], 0, 2)
    assert [m.content for m in client.list_memories(store)] == ["She is three years old."]


def test_roles_minimum_length_and_conversations_are_the_callers_to_choose(client: Client, make_store) -> None:
    store = make_store()
    conversation = [user("ok"), assistant("The meeting moved to Thursday."), user("Thanks, noted that.")]
    done = client.remember(store, conversation, roles=["user", "assistant"], min_chars=10)
    assert [m.memory.content for m in done.memories] == ["The meeting moved to Thursday.", "Thanks, noted that."]
    # The same words in another conversation are another turn; in the same one, the same turn.
    again = client.remember(store, [user("Thanks, noted that.")], conversation_id="c2")
    assert [m.memory.content for m in again.memories] == ["Thanks, noted that."]
    assert client.remember(store, [user("Thanks, noted that.")], conversation_id="c2").skipped_turn_count == 1


def test_bad_remember_requests_are_refused_by_field(client: Client, make_store) -> None:
    store = make_store()
    for call, field in (
        (lambda: client.remember(store, [user("x")], extract=True), "extract"),
        (lambda: client.remember(store, [user("x")], min_chars=-1), "min_chars"),
        (lambda: client.remember("", [user("x")]), "store"),
        (lambda: client.remember(store, [{"role": "system", "content": [{"text": "x"}]}]), "messages[0].role"),
    ):
        with pytest.raises((InvalidArgument, ValueError)) as refused:
            call()
        if isinstance(refused.value, InvalidArgument):
            assert refused.value.field_violations[0][0] == field
    with pytest.raises(NotFound):
        client.remember(unique("nowhere"), [user("I exist")])
    # Each turn is embedded: one call remembers what one AddMemories adds at most, and a longer one
    # stores nothing.
    with pytest.raises(InvalidArgument) as too_many:
        client.remember(store, [user(f"Fact number {n} about the user") for n in range(1001)])
    assert too_many.value.field_violations[0][0] == "messages"
    assert list(client.list_memories(store)) == []


def test_a_turn_to_remember_holding_a_control_character_is_refused_by_its_block(client: Client, make_store) -> None:
    """An entry's content holds no control character (AddMemories refuses one, and Postgres' text cannot hold
    a NUL): a turn Remember would store is refused by the block that holds one, and nothing is stored. A turn
    of a role not remembered is not stored, and may hold what it likes."""
    store = make_store()
    for control in ("\x00", "\x1b"):
        conversation = [
            user("I like green tea."),
            {"role": "user", "content": [{"text": "ok"}, {"text": f"wha{control}t"}]},
        ]
        with pytest.raises(InvalidArgument) as refused:
            client.remember(store, conversation)
        field, reason = refused.value.field_violations[0]
        assert field == "messages[1].content[1].text" and "control characters" in reason and repr(control) in reason
    assert list(client.list_memories(store)) == []
    # Nor is what was injected, repeated as text (a provider's answer may hold what it likes).
    region = '<memory>\n<entry source="shell">\x1b[1mtea\x1b[0m</entry>\n</memory>'
    asked = {"role": "user", "content": [{"text": region}, {"text": "I like green tea."}]}
    done = client.remember(store, [asked, assistant("Noted\x00, with \x1b[1mtea\x1b[0m.")])
    assert [m.memory.content for m in done.memories] == ["I like green tea."]


def test_a_turn_longer_than_an_entry_holds_is_refused_by_its_message(client: Client, make_store) -> None:
    """A turn is kept as one entry, and an entry holds 16,384 characters (AddMemories refuses more, and an
    export would not import again): a longer turn is refused by its message, counted as it would be stored
    (its own text blocks a line apart), and nothing is stored. Injected context repeated beside it does not
    count, and a turn of a role not remembered may be as long as it likes."""
    store = make_store()
    long = ["I like green tea. " * 500, "And oolong. " * 700]  # 9,000 and 8,400 characters: 17,400 kept
    conversation = [user("Hi!"), assistant("x" * 20_000), {"role": "user", "content": [{"text": t} for t in long]}]
    with pytest.raises(InvalidArgument) as refused:
        client.remember(store, conversation)
    field, reason = refused.value.field_violations[0]
    assert field == "messages[2]" and "holds 17400 characters of its own text" in reason and "16384" in reason
    assert list(client.list_memories(store)) == []
    region = "<memory>\n<entry>" + "tea " * 5000 + "</entry>\n</memory>"
    within = {"role": "user", "content": [{"text": region}, {"text": long[0]}]}
    done = client.remember(store, [within, assistant("x" * 20_000)])
    assert [m.memory.content for m in done.memories] == [long[0].strip()]


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChat]:
    fake = FakeChat()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def extracting(chat: FakeChat, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(
        tmp_path_factory.mktemp("extracting"), "--extractor-url", chat.base_url, "--extractor-model", "fake"
    ) as process:
        yield process


def test_extraction_adds_facts_corrects_kept_ones_and_ignores_known_ones(
    extracting: ServerProcess, chat: FakeChat
) -> None:
    with Client(extracting.address, timeout=30) as cf:
        store = unique("facts")
        cf.create_store(store)
        scope = {"user_id": "ana"}
        first = cf.remember(store, [user("Hi! I live in Denver. I work as a nurse.")], scope=scope, extract=True)
        assert [(m.action, m.memory.content) for m in first.memories] == [
            (ADDED, "I live in Denver."),
            (ADDED, "I work as a nurse."),
        ]
        home = first.memories[0].memory

        moved = cf.remember(store, [user("Big news! I live in Lisbon now.")], scope=scope, extract=True)
        assert [(m.action, m.memory.id, m.memory.content) for m in moved.memories] == [
            (UPDATED, home.id, "I live in Lisbon now.")
        ]
        (previous,) = cf.list_memory_versions(home.id)
        assert previous.memory.content == "I live in Denver."

        known = cf.remember(store, [user("Yes. I work as a nurse.")], scope=scope, extract=True)
        assert list(known.memories) == [] and known.remembered_turn_count == 1
        assert sorted(m.content for m in cf.list_memories(store)) == ["I live in Lisbon now.", "I work as a nurse."]

        # The extractor saw the kept memories of this scope only, by short ids, and never injected text.
        asked = [r["body"] for r in chat.requests]
        assert all(body["model"] == "fake" for body in asked)
        assert all("Prefers" not in message["content"] for body in asked for message in body["messages"])


def test_an_extractor_that_fails_stores_nothing_and_a_retry_works(extracting: ServerProcess, chat: FakeChat) -> None:
    with Client(extracting.address, timeout=30) as cf:
        store = unique("failing")
        cf.create_store(store)
        conversation = [user("My favourite colour is green.")]
        # Facts no entry may hold (a NUL, which Postgres' text cannot hold; more than an entry's 16,384
        # characters) are the model's failure too, not an INTERNAL.
        reasons = {
            "error": "HTTP status 500",
            "garbage": "the answer is not a chat completion holding JSON",
            "nul": "a fact must not contain control characters; found '\\x00' at 29",
            "long": "a fact holds 20",
            "nul_decision": "an ADD decision's text must not contain control characters",
        }
        for mode, reason in reasons.items():
            chat.mode = mode
            try:
                with pytest.raises(Unavailable) as refused:
                    cf.remember(store, conversation, extract=True)
            finally:
                chat.mode = "ok"
            assert refused.value.reason == "EXTRACTOR_FAILED"
            assert f"the extractor failed: {reason}" in refused.value.message
            assert list(cf.list_memories(store)) == []
        done = cf.remember(store, conversation, extract=True)
        assert [m.memory.content for m in done.memories] == ["My favourite colour is green."]
