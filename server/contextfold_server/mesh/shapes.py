"""The model APIs whose requests the processor reads and writes, each in its own format.

Each shape reads a request body into the conversation `Inject` takes (user and assistant messages;
system prompts stay apart and are not sent) and says, for each message, how a text block is
appended to it in that API's own form: text added to the end of a string content, or a text part
added after the parts of an array content. Nothing else in the body changes, byte for byte
(`spans.py`).

Text contextfold folded in on an earlier call comes back as ordinary text from a client that
kept it: the default format's region (`<memory>` … `</memory>`) is recognised and sent as an
injected block, so it never feeds the query, a message that holds one is not folded into again,
and the entries it shows are not injected twice (their content appears in it). Another format's
text cannot be told from the user's own: then every message before the latest user message is
also sent as a block that may show entries (`shown_earlier`), so an entry whose content an earlier
message holds counts as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from contextfold.v1 import conversation_pb2

from ..engine.memory import MEMORY_SOURCE
from .spans import Span, appended_to_array, appended_to_string, document, elements, members

USER = conversation_pb2.ROLE_USER
ASSISTANT = conversation_pb2.ROLE_ASSISTANT
# The default format's region, as contextfold renders it (engine/format.py): an entry's content is
# escaped, so it holds no `<` and may span lines.
_REGION = re.compile(r"<memory>\n(?:<entry(?: source=\"[^\"\n]*\")?>[^<]*</entry>\n?)*</memory>")

# An edit of the body: at this character, insert this text.
Edit = tuple[int, str]
# How text blocks are appended to one message; and one API's text part for a text.
Appender = Callable[[list[str]], Edit]
Part = Callable[[str], dict[str, Any]]


class NotThisShape(ValueError):
    """The body is JSON, but not a request of the route's API (a field missing or of another type)."""


@dataclass
class Located:
    """One message of the conversation, and how a block of text is appended to it."""

    message: conversation_pb2.Message
    append: Appender


@dataclass(frozen=True)
class Shape:
    """One API's requests: its name (as reports and metrics say it) and how a body is read."""

    name: str
    read: Callable[[str], list[Located]]


def apply(text: str, edit: Edit) -> str:
    at, inserted = edit
    return text[:at] + inserted + text[at:]


def text_blocks(text: str) -> list[conversation_pb2.ContentBlock]:
    """A text as content blocks: the text, with each region folded in earlier as an injected block."""
    blocks = []
    at = 0
    for region in _REGION.finditer(text):
        if region.start() > at:
            blocks.append(conversation_pb2.ContentBlock(text=text[at : region.start()]))
        blocks.append(
            conversation_pb2.ContentBlock(
                injected=conversation_pb2.InjectedBlock(source=MEMORY_SOURCE, text=region.group())
            )
        )
        at = region.end()
    if at < len(text) or not blocks:
        blocks.append(conversation_pb2.ContentBlock(text=text[at:]))
    return blocks


def shown_earlier(messages: list[conversation_pb2.Message]) -> None:
    """For a format whose region cannot be recognised: each message before the latest user message
    gains a block holding its text (an injected block from memory that names no entries), so an
    entry whose content it holds is not injected again. The query and the fold target are the
    latest messages', which gain nothing."""
    latest = max((i for i, message in enumerate(messages) if message.role == USER), default=-1)
    for message in messages[:latest]:
        text = "\n".join(block.text for block in message.content if block.WhichOneof("block") == "text")
        if text.strip():
            shown = conversation_pb2.InjectedBlock(source=MEMORY_SOURCE, text=text)
            message.content.append(conversation_pb2.ContentBlock(injected=shown))


def _tool_result(identifier: Any) -> conversation_pb2.ContentBlock:
    return conversation_pb2.ContentBlock(
        tool_result=conversation_pb2.ToolResultBlock(tool_use_id=identifier if isinstance(identifier, str) else "")
    )


def _field(text: str, span: Span, name: str, kind: type | tuple[type, ...]) -> Span:
    found = members(text, span).get(name)
    if found is None or not isinstance(found.value, kind):
        raise NotThisShape(f"`{name}` is missing or not {_kind_name(kind)}")
    return found


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names: dict[type, str] = {list: "an array", str: "a string", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _appending(text: str, span: Span, part: Part) -> Appender:
    """How text blocks are appended to a content that is a string (the texts, joined) or an array
    (one `part` each)."""
    if isinstance(span.value, str):
        return lambda texts: appended_to_string(text, span, "".join(texts))
    return lambda texts: appended_to_array(text, span, [part(t) for t in texts])


def _openai_parts(parts: list[Any], text_types: tuple[str, ...]) -> list[conversation_pb2.ContentBlock]:
    blocks: list[conversation_pb2.ContentBlock] = []
    for part in parts:
        if isinstance(part, dict) and part.get("type") in text_types and isinstance(part.get("text"), str):
            blocks.extend(text_blocks(part["text"]))
    return blocks


def _content_blocks(value: Any, text_types: tuple[str, ...]) -> list[conversation_pb2.ContentBlock]:
    return text_blocks(value) if isinstance(value, str) else _openai_parts(value, text_types)


def read_chat_completions(text: str) -> list[Located]:
    """OpenAI Chat Completions: `messages`, each with a `role` and a `content` string or parts;
    `system` and `developer` messages are the system prompt; a `tool` message is a tool result."""
    found = []
    for element in elements(text, _field(text, _object(text), "messages", list)):
        if not isinstance(element.value, dict):
            raise NotThisShape("a message is not an object")
        role = element.value.get("role")
        if role not in ("user", "assistant", "tool", "function"):
            continue
        content = members(text, element).get("content")
        blocks = _content_blocks(content.value, ("text",)) if content is not None and _holds(content) else []
        if role in ("tool", "function"):
            blocks.insert(0, _tool_result(element.value.get("tool_call_id", "")))
        message = conversation_pb2.Message(role=ASSISTANT if role == "assistant" else USER, content=blocks)
        found.append(Located(message, _appending_to(text, content, _part("text"))))
    return found


def read_responses(text: str) -> list[Located]:
    """OpenAI Responses: `input` as a string (one user message) or items: messages (`role`, `content`
    as a string or `input_text` / `output_text` parts) and tool calls' outputs (`function_call_output`
    and the like, their `output` a string); `instructions` is the system prompt."""
    given = _field(text, _object(text), "input", (str, list))
    if isinstance(given.value, str):
        message = conversation_pb2.Message(role=USER, content=text_blocks(given.value))
        return [Located(message, lambda texts: appended_to_string(text, given, "".join(texts)))]
    found = []
    for item in elements(text, given):
        if not isinstance(item.value, dict):
            raise NotThisShape("an input item is not an object")
        kind, role = item.value.get("type", "message"), item.value.get("role")
        fields = members(text, item)
        if kind == "message" and role in ("user", "assistant"):
            content = fields.get("content")
            kinds = ("input_text", "output_text")
            blocks = _content_blocks(content.value, kinds) if content is not None and _holds(content) else []
            message = conversation_pb2.Message(role=USER if role == "user" else ASSISTANT, content=blocks)
            found.append(
                Located(
                    message, _appending_to(text, content, _part("output_text" if role == "assistant" else "input_text"))
                )
            )
        elif isinstance(kind, str) and kind.endswith("_call_output"):
            output = fields.get("output")
            message = conversation_pb2.Message(role=USER, content=[_tool_result(item.value.get("call_id", ""))])
            found.append(Located(message, _appending_to(text, output, _part("input_text"))))
        elif isinstance(kind, str) and kind.endswith("_call"):
            found.append(Located(conversation_pb2.Message(role=ASSISTANT), _never))
    return found


def read_anthropic_messages(text: str) -> list[Located]:
    """Anthropic Messages: `system` apart; `messages`, each a `role` and a `content` string or blocks
    (`text`, `tool_result`, `tool_use`, `image`, …)."""
    found = []
    for element, role in _user_and_assistant(text):
        content = members(text, element).get("content")
        blocks: list[conversation_pb2.ContentBlock] = []
        if content is not None and isinstance(content.value, str):
            blocks = text_blocks(content.value)
        elif content is not None and isinstance(content.value, list):
            for block in content.value:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    blocks.extend(text_blocks(block["text"]))
                elif block.get("type") == "tool_result":
                    blocks.append(_tool_result(block.get("tool_use_id", "")))
        message = conversation_pb2.Message(role=role, content=blocks)
        found.append(Located(message, _appending_to(text, content, _part("text"))))
    return found


def read_converse(text: str) -> list[Located]:
    """Bedrock Converse (and ConverseStream): `system` apart; `messages`, each a `role` and `content`
    blocks (`text`, `toolResult`, `toolUse`, `image`, `document`, …)."""
    found = []
    for element, role in _user_and_assistant(text):
        content = members(text, element).get("content")
        if content is None or not isinstance(content.value, list):
            raise NotThisShape("a message's `content` is not an array")
        blocks: list[conversation_pb2.ContentBlock] = []
        for block in content.value:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                blocks.extend(text_blocks(block["text"]))
            elif isinstance(block, dict) and isinstance(block.get("toolResult"), dict):
                blocks.append(_tool_result(block["toolResult"].get("toolUseId", "")))
        found.append(
            Located(conversation_pb2.Message(role=role, content=blocks), _appending(text, content, _converse_text))
        )
    return found


def _object(text: str) -> Span:
    """The body, which must be one JSON object."""
    root = document(text)
    if not isinstance(root.value, dict):
        raise NotThisShape("the body is not a JSON object")
    return root


def _user_and_assistant(text: str) -> Iterator[tuple[Span, int]]:
    """Each element of the body's `messages` with its role, where every message is `user` or
    `assistant` (Anthropic's and Bedrock's shapes: the system prompt is a field of its own)."""
    for element in elements(text, _field(text, _object(text), "messages", list)):
        if not isinstance(element.value, dict) or element.value.get("role") not in ("user", "assistant"):
            raise NotThisShape("a message is not an object with the role `user` or `assistant`")
        yield element, USER if element.value["role"] == "user" else ASSISTANT


def _part(kind: str) -> Part:
    """A text part of the given `type`."""
    return lambda text: {"type": kind, "text": text}


def _converse_text(text: str) -> dict[str, Any]:
    return {"text": text}


def _holds(content: Span | None) -> bool:
    return content is not None and isinstance(content.value, str | list)


def _appending_to(
    text: str, content: Span | None, part: Callable[[str], dict[str, Any]]
) -> Callable[[list[str]], Edit]:
    """`_appending` for a content that may be absent or of neither kind: then nothing can be appended."""
    if content is None or not _holds(content):
        return _never
    return _appending(text, content, part)


def _never(texts: list[str]) -> Edit:
    raise NotThisShape("this message has no content a text block can be appended to")


CHAT_COMPLETIONS = Shape("openai.chat_completions", read_chat_completions)
RESPONSES = Shape("openai.responses", read_responses)
ANTHROPIC_MESSAGES = Shape("anthropic.messages", read_anthropic_messages)
CONVERSE = Shape("bedrock.converse", read_converse)

_CONVERSE_PATH = re.compile(r"/model/[^/]+/converse(?:-stream)?")


def shape_of(method: str, path: str) -> Shape | None:
    """The shape of a request by its method and path (the query string apart), or None: a route the
    processor does not recognise passes untouched. Paths may carry a prefix (a gateway's, Azure's
    `/openai/deployments/{name}`)."""
    if method != "POST":
        return None
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return CHAT_COMPLETIONS
    if path.endswith("/responses"):
        return RESPONSES
    if path.endswith("/v1/messages"):
        return ANTHROPIC_MESSAGES
    if _CONVERSE_PATH.search(path) and path.endswith(("/converse", "/converse-stream")):
        return CONVERSE
    return None
