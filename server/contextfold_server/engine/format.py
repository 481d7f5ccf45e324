"""Rendering entries into the text the model sees."""

from __future__ import annotations

from collections.abc import Sequence

from .entries import RetrievedEntry


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
