"""The model APIs' request shapes, read and written (server/contextfold_server/mesh/shapes.py): pure
functions, no servers."""

from __future__ import annotations

import json

import pytest
from contextfold.v1 import conversation_pb2
from contextfold_server.mesh.settings import BadSetting, ours, settings
from contextfold_server.mesh.shapes import NotThisShape, apply, shape_of, text_blocks
from contextfold_server.mesh.spans import NotJson

USER, ASSISTANT = conversation_pb2.ROLE_USER, conversation_pb2.ROLE_ASSISTANT


def kinds(message: conversation_pb2.Message) -> list[str]:
    return [block.WhichOneof("block") for block in message.content]


@pytest.mark.parametrize(
    "method, path, name",
    [
        ("POST", "/v1/chat/completions", "openai.chat_completions"),
        ("POST", "/openai/deployments/gpt4/chat/completions?api-version=2024-06-01", "openai.chat_completions"),
        ("POST", "/v1/responses", "openai.responses"),
        ("POST", "/v1/messages", "anthropic.messages"),
        ("POST", "/model/anthropic.claude-3-haiku/converse", "bedrock.converse"),
        ("POST", "/model/us.amazon.nova-lite-v1:0/converse-stream", "bedrock.converse"),
        ("GET", "/v1/chat/completions", None),
        ("POST", "/v1/embeddings", None),
        ("POST", "/model/x/invoke", None),
    ],
)
def test_a_route_is_known_by_its_method_and_path(method: str, path: str, name: str | None) -> None:
    shape = shape_of(method, path)
    assert (shape.name if shape else None) == name


def test_chat_completions_keeps_the_system_prompt_apart_and_a_tool_message_is_a_tool_result() -> None:
    body = json.dumps(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function"}]},
                {"role": "tool", "tool_call_id": "t1", "content": "Sunny."},
            ]
        }
    )
    located = shape_of("POST", "/v1/chat/completions").read(body)
    assert [m.message.role for m in located] == [USER, ASSISTANT, USER]
    assert kinds(located[2].message) == ["tool_result", "text"]
    # A tool result's own content is a string: the folded text follows it there.
    edited = json.loads(apply(body, located[2].append(["\n\nM"])))
    assert edited["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "Sunny.\n\nM"}
    with pytest.raises(NotThisShape):
        located[1].append(["M"])  # no content to append to


def test_responses_input_as_a_string_is_one_user_message() -> None:
    body = '{"model":"m","input":"Where do I live?","instructions":"x"}'
    (located,) = shape_of("POST", "/v1/responses").read(body)
    assert located.message.role == USER and located.message.content[0].text == "Where do I live?"
    assert (
        apply(body, located.append(["\n\nM"])) == '{"model":"m","input":"Where do I live?\\n\\nM","instructions":"x"}'
    )


def test_responses_items_carry_messages_and_tool_outputs() -> None:
    body = json.dumps(
        {
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ]
        }
    )
    located = shape_of("POST", "/v1/responses").read(body)
    assert [m.message.role for m in located] == [USER, ASSISTANT, USER]
    assert kinds(located[2].message) == ["tool_result"]
    edited = json.loads(apply(body, located[0].append(["\n\nM"])))
    assert edited["input"][0]["content"][-1] == {"type": "input_text", "text": "\n\nM"}


def test_anthropic_blocks_keep_the_tool_result_first_and_gain_a_text_block_last() -> None:
    body = json.dumps(
        {
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
            ],
        }
    )
    (located,) = shape_of("POST", "/v1/messages").read(body)
    assert kinds(located.message) == ["tool_result"]
    edited = json.loads(apply(body, located.append(["<memory>\n</memory>"])))
    assert edited["messages"][0]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
        {"type": "text", "text": "<memory>\n</memory>"},
    ]


def test_converse_requires_content_blocks() -> None:
    with pytest.raises(NotThisShape):
        shape_of("POST", "/model/m/converse").read('{"messages":[{"role":"user","content":"text"}]}')


@pytest.mark.parametrize(
    "body", ['{"messages": [', '{"messages": []} trailing', "[1, 2]", '{"messages": {"role": "user"}}', ""]
)
def test_a_body_that_is_not_the_shape_is_refused_with_the_reason(body: str) -> None:
    with pytest.raises((NotJson, NotThisShape)):
        shape_of("POST", "/v1/chat/completions").read(body)


def test_a_region_folded_earlier_comes_back_as_an_injected_block_and_the_rest_as_text() -> None:
    region = '<memory>\n<entry source="notes">Ana&#39;s dog &lt;Biscuit&gt;</entry>\n<entry>Second</entry>\n</memory>'
    blocks = text_blocks(f"What is it?\n\n{region}\n\nthanks")
    assert [b.WhichOneof("block") for b in blocks] == ["text", "injected", "text"]
    assert blocks[1].injected.source == "memory" and blocks[1].injected.text == region
    assert not blocks[1].injected.entry_ids
    # Text that only looks like the start of a region is the user's own.
    assert [b.WhichOneof("block") for b in text_blocks("I typed <memory> myself")] == ["text"]


def test_the_fold_is_one_insertion_at_the_end_of_the_content_and_every_other_byte_is_kept() -> None:
    body = '{ "messages" : [ {"role":"user" , "content":"caf\\u00e9 \\"q\\""} ] , "n": 1.0E+2, "u": "\\ud83d\\ude00"}'
    (located,) = shape_of("POST", "/v1/chat/completions").read(body)
    at, inserted = located.append(["\n\nné"])
    assert body[:at].endswith('\\"q\\"') and body[at:].startswith('"} ]')
    assert inserted == "\\n\\nné"
    edited = apply(body, (at, inserted))
    assert json.loads(edited) == {**json.loads(body), "messages": [{"role": "user", "content": 'café "q"\n\nné'}]}


def test_the_operators_settings_win_and_a_bad_one_is_named() -> None:
    stream = ours([("x-contextfold-max-entries", "2"), ("authorization", "Bearer k")])
    request = ours([("x-contextfold-max-entries", "9"), ("x-contextfold-user-id", "u1"), ("content-type", "x")])
    chosen = settings(stream, request)
    assert chosen.memory.max_entries == 2 and chosen.scope.user_id == "u1"
    with pytest.raises(BadSetting, match="x-contextfold-ranking: 'best' is not one of"):
        settings({}, {"ranking": "best"})
    with pytest.raises(BadSetting, match="x-contextfold-colour: not a setting"):
        settings({}, {"colour": "red"})
    with pytest.raises(BadSetting, match="sent more than once"):
        ours([("x-contextfold-stores", "a"), ("x-contextfold-stores", "b")])


def test_an_entry_whose_content_spans_lines_is_still_part_of_its_region() -> None:
    region = "<memory>\n<entry>first line\nsecond line</entry>\n</memory>"
    assert [b.WhichOneof("block") for b in text_blocks(f"Q?\n\n{region}")] == ["text", "injected"]
