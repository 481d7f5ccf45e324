"""Converters between contextfold's messages and the message dicts agents already hold.

The dict shape is the Bedrock Converse / Strands one:
`{"role": "user", "content": [{"text": ...}, {"toolUse": ...}, {"toolResult": ...}]}`.
Conversion is lossless both ways: a block is given a typed form only when
converting it back gives the very same dict; any other block travels as
`raw_json`. Bytes inside JSON payloads are carried as `{"$bytes": "<base64>"}`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from .v1 import conversation_pb2 as pb

MessageDict = dict[str, Any]

_ROLES = {"user": pb.ROLE_USER, "assistant": pb.ROLE_ASSISTANT}
_ROLE_NAMES = {value: name for name, value in _ROLES.items()}
_BYTES_KEY = "$bytes"


def _encode_bytes(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {_BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _decode_bytes(value: dict[str, Any]) -> Any:
    if len(value) == 1 and _BYTES_KEY in value:
        return base64.b64decode(value[_BYTES_KEY])
    return value


def message_dict(message: Message) -> dict[str, Any]:
    """A message as JSON-ready data, fields named as in the protos; numbers in entries' metadata that
    are whole come back whole (`5`, not `5.0`: a Struct keeps every number as a double)."""
    return _whole_metadata(json_format.MessageToDict(message, preserving_proto_field_name=True))


def whole(value: Any) -> Any:
    """`value` (JSON data) with each float that is a whole number, within a double's exact range, an int."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole(item) for item in value]
    return value


def _whole_metadata(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: whole(item) if key == "metadata" else _whole_metadata(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_metadata(item) for item in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, default=_encode_bytes, ensure_ascii=False, separators=(",", ":"))


def loads(text: str) -> Any:
    return json.loads(text, object_hook=_decode_bytes)


# Each typed block kind: how to build it from a dict, and the dict it stands for.


def _tool_use(block: Mapping[str, Any]) -> pb.ContentBlock:
    use = block["toolUse"]
    return pb.ContentBlock(
        tool_use=pb.ToolUseBlock(tool_use_id=use["toolUseId"], name=use["name"], input_json=dumps(use["input"]))
    )


def _tool_result(block: Mapping[str, Any]) -> pb.ContentBlock:
    result = block["toolResult"]
    return pb.ContentBlock(
        tool_result=pb.ToolResultBlock(
            tool_use_id=result["toolUseId"],
            status=result.get("status", ""),
            content_json=dumps(result["content"]),
        )
    )


def _image(block: Mapping[str, Any]) -> pb.ContentBlock:
    image = block["image"]
    return pb.ContentBlock(image=pb.ImageBlock(format=image["format"], data=image["source"]["bytes"]))


def _document(block: Mapping[str, Any]) -> pb.ContentBlock:
    document = block["document"]
    return pb.ContentBlock(
        document=pb.DocumentBlock(format=document["format"], name=document["name"], data=document["source"]["bytes"])
    )


def _reasoning(block: Mapping[str, Any]) -> pb.ContentBlock:
    reasoning = block["reasoningContent"]["reasoningText"]
    return pb.ContentBlock(
        reasoning=pb.ReasoningBlock(text=reasoning["text"], signature=reasoning.get("signature", ""))
    )


def _injected(block: Mapping[str, Any]) -> pb.ContentBlock:
    injected = block["injected"]
    return pb.ContentBlock(
        injected=pb.InjectedBlock(
            source=injected["source"],
            text=injected["text"],
            entry_ids=list(injected.get("entryIds", [])),
            sources=list(injected.get("sources", [])),
        )
    )


_TYPED: dict[str, Callable[[Mapping[str, Any]], pb.ContentBlock]] = {
    "text": lambda block: pb.ContentBlock(text=block["text"]),
    "toolUse": _tool_use,
    "toolResult": _tool_result,
    "image": _image,
    "document": _document,
    "reasoningContent": _reasoning,
    "injected": _injected,
}


def block_to_proto(block: Mapping[str, Any]) -> pb.ContentBlock:
    if len(block) == 1:
        (kind,) = block
        build = _TYPED.get(kind)
        if build is not None:
            try:
                typed = build(block)
            except (KeyError, TypeError, ValueError):
                typed = None
            if typed is not None and block_from_proto(typed) == block:
                return typed
    return pb.ContentBlock(raw_json=dumps(dict(block)))


def block_from_proto(block: pb.ContentBlock) -> dict[str, Any]:
    kind = block.WhichOneof("block")
    if kind == "text":
        return {"text": block.text}
    if kind == "tool_use":
        use = block.tool_use
        return {"toolUse": {"toolUseId": use.tool_use_id, "name": use.name, "input": loads(use.input_json)}}
    if kind == "tool_result":
        result = block.tool_result
        converted: dict[str, Any] = {"toolUseId": result.tool_use_id, "content": loads(result.content_json)}
        if result.status:
            converted["status"] = result.status
        return {"toolResult": converted}
    if kind == "image":
        return {"image": {"format": block.image.format, "source": {"bytes": block.image.data}}}
    if kind == "document":
        document = block.document
        return {"document": {"format": document.format, "name": document.name, "source": {"bytes": document.data}}}
    if kind == "reasoning":
        text: dict[str, Any] = {"text": block.reasoning.text}
        if block.reasoning.signature:
            text["signature"] = block.reasoning.signature
        return {"reasoningContent": {"reasoningText": text}}
    if kind == "injected":
        injected = block.injected
        converted = {"source": injected.source, "text": injected.text, "entryIds": list(injected.entry_ids)}
        if injected.sources:
            converted["sources"] = list(injected.sources)
        return {"injected": converted}
    if kind == "raw_json":
        return loads(block.raw_json)
    raise ValueError("content block has no kind set")


def to_proto_messages(messages: Iterable[Mapping[str, Any]]) -> list[pb.Message]:
    """Agent message dicts to contextfold messages. Keys beside role and content ride along in `metadata_json`."""
    converted = []
    for index, message in enumerate(messages):
        role = _ROLES.get(message["role"])
        if role is None:
            raise ValueError(f"unknown role {message['role']!r}: expected 'user' or 'assistant'")
        # A string where blocks belong (another SDK's shape) would be read as one block per character.
        given = message["content"]
        content = None if isinstance(given, str | bytes) else list(given)
        if content is None or not all(isinstance(block, Mapping) for block in content):
            raise ValueError(
                f"messages[{index}].content must be a list of content blocks, such as [{{'text': '...'}}];"
                f" got {type(given).__name__}"
            )
        extra = {key: value for key, value in message.items() if key not in ("role", "content")}
        converted.append(
            pb.Message(
                role=role,
                content=[block_to_proto(block) for block in content],
                metadata_json=dumps(extra) if extra else "",
            )
        )
    return converted


def from_proto_messages(messages: Iterable[pb.Message]) -> list[MessageDict]:
    """contextfold messages back to agent message dicts, injected blocks included as `{"injected": ...}`."""
    converted = []
    for message in messages:
        result: MessageDict = {
            "role": _ROLE_NAMES[message.role],
            "content": [block_from_proto(block) for block in message.content],
        }
        if message.metadata_json:
            result.update(loads(message.metadata_json))
        converted.append(result)
    return converted


def render_for_model(messages: Iterable[Mapping[str, Any]]) -> list[MessageDict]:
    """The messages as a model should see them: each injected block becomes the text block it stands for."""
    return [
        {
            **message,
            "content": [
                {"text": block["injected"]["text"]} if "injected" in block else block for block in message["content"]
            ],
        }
        for message in messages
    ]
