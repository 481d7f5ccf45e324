"""Rendering entries into the text the model sees."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from .entries import RetrievedEntry


class MemoryFormat(Enum):
    XML = "xml"
    BULLETS = "bullets"
    MARKDOWN = "markdown"


def escape_xml_text(value: str) -> str:
    """Escape text placed between tags. `&` goes first so nothing is escaped twice.

    Memory is often user-derived: unescaped, a stray `</entry>` would break the
    block and open a stored prompt-injection path.
    """
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_xml_attr(value: str) -> str:
    """Escape a value placed inside a double-quoted attribute."""
    return escape_xml_text(value).replace('"', "&quot;").replace("'", "&#39;")


def format_memory_block(entries: Sequence[RetrievedEntry]) -> str:
    """The reference's default `<memory>` block, one `<entry>` per result.

    Each entry names its store in `source`, so the model can attribute and
    weigh what it is shown.
    """
    lines = [
        f'<entry source="{escape_xml_attr(entry.store)}">{escape_xml_text(entry.content)}</entry>'
        if entry.store
        else f"<entry>{escape_xml_text(entry.content)}</entry>"
        for entry in entries
    ]
    joined = "\n".join(lines)
    return f"<memory>\n{joined}\n</memory>"


def format_bullets(entries: Sequence[RetrievedEntry]) -> str:
    """One `- CONTENT` line per entry: plain text, for models and prompts that do without markup."""
    return "\n".join(f"- {entry.content}" for entry in entries)


def format_markdown(entries: Sequence[RetrievedEntry]) -> str:
    """A `### Memory` heading, then one `- CONTENT (STORE)` line per entry."""
    lines = [f"- {entry.content} ({entry.store})" if entry.store else f"- {entry.content}" for entry in entries]
    return "### Memory\n" + "\n".join(lines)


NAMED_FORMATS = {
    MemoryFormat.XML: format_memory_block,
    MemoryFormat.BULLETS: format_bullets,
    MemoryFormat.MARKDOWN: format_markdown,
}
