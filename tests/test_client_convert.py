"""The client's converters: agent message dicts to contextfold messages and back, losslessly."""

from __future__ import annotations

import pytest
from contextfold import from_proto_messages, render_for_model, to_proto_messages

CONVERSATION = [
    {"role": "user", "content": [{"text": "hi"}, {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}]},
    {
        "role": "assistant",
        "content": [
            {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
            {"toolUse": {"toolUseId": "t", "name": "search", "input": {"q": "x", "n": [1, 2.5, None]}}},
        ],
        "metadata": {"usage": {"inputTokens": 1}},
    },
    {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "t", "status": "error", "content": [{"json": {"a": 1}}, {"text": "t"}]}},
            {"document": {"format": "pdf", "name": "doc", "source": {"bytes": b"%PDF"}}},
            {"cachePoint": {"type": "default"}},
            {"image": {"format": "png", "source": {"s3Location": {"uri": "s3://bucket/key"}}}},
            {"toolUse": {"toolUseId": "u", "name": "n", "input": {}, "extra": True}},
            {"injected": {"source": "memory", "text": "\n\n<memory/>", "entryIds": ["m1"]}},
            {"injected": {"source": "coalesced", "text": "\n\n<a/>", "entryIds": [], "sources": ["a", "b"]}},
        ],
    },
]


def test_conversion_round_trips_every_block_kind() -> None:
    assert from_proto_messages(to_proto_messages(CONVERSATION)) == CONVERSATION


def test_blocks_are_typed_when_exact_and_raw_json_otherwise() -> None:
    kinds = [[block.WhichOneof("block") for block in message.content] for message in to_proto_messages(CONVERSATION)]
    assert kinds == [
        ["text", "image"],
        ["reasoning", "tool_use"],
        ["tool_result", "document", "raw_json", "raw_json", "raw_json", "injected", "injected"],
    ]


def test_the_model_sees_injected_blocks_as_text() -> None:
    rendered = render_for_model(CONVERSATION)
    assert rendered[2]["content"][-2:] == [{"text": "\n\n<memory/>"}, {"text": "\n\n<a/>"}]
    assert rendered[:2] == CONVERSATION[:2]


def test_content_given_as_a_string_is_refused_naming_the_message_and_the_shape() -> None:
    with pytest.raises(ValueError, match=r"messages\[1\]\.content must be a list of content blocks.*got str"):
        to_proto_messages([{"role": "user", "content": [{"text": "hi"}]}, {"role": "user", "content": "Which seat?"}])
    with pytest.raises(ValueError, match=r"messages\[0\]\.content must be a list of content blocks.*got list"):
        to_proto_messages([{"role": "user", "content": ["Which seat?"]}])


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role 'system'"):
        to_proto_messages([{"role": "system", "content": []}])
