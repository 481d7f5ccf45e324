"""Jinja2 format templates, sandboxed and bounded.

Templates render in `ImmutableSandboxedEnvironment` with strict undefined: no
attribute walks to dunders, no mutation, no unsafe `format`. Work is bounded
too: the template's size, its output, `range`, and string or list
repetition have limits, and the worker that renders is killed past its time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from ..engine.format import escape_xml_attr

MAX_TEMPLATE_LENGTH = 16 * 1024
MAX_OUTPUT_LENGTH = 64 * 1024
MAX_RANGE = 10_000


class TemplateLimitExceeded(Exception):
    pass


def escape_xml(value: Any) -> str:
    """The filter templates use for XML, safe in content and in quoted attributes alike."""
    return escape_xml_attr(str(value))


def _bounded_range(*args: int) -> range:
    bounded = range(*args)
    if len(bounded) > MAX_RANGE:
        raise TemplateLimitExceeded(f"range of {len(bounded)} items; at most {MAX_RANGE}")
    return bounded


@functools.cache
def environment() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*" and any(
                isinstance(sequence, str | list | tuple)
                and isinstance(count, int)
                and len(sequence) * count > MAX_OUTPUT_LENGTH
                for sequence, count in ((left, right), (right, left))
            ):
                raise TemplateLimitExceeded("a repetition larger than the output limit")
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise TemplateLimitExceeded(f"an exponent of {right}; at most 64")
            return super().call_binop(context, operator, left, right)

    environment = BoundedEnvironment(undefined=StrictUndefined, autoescape=False)
    environment.filters["escape_xml"] = escape_xml
    environment.globals["range"] = _bounded_range
    return environment


@functools.lru_cache(maxsize=256)
def compile_template(source: str) -> Any:
    """The compiled template; raises ValueError with the syntax error. Cached by source."""
    from jinja2 import TemplateSyntaxError

    if len(source) > MAX_TEMPLATE_LENGTH:
        raise ValueError(f"is {len(source)} characters; at most {MAX_TEMPLATE_LENGTH}")
    try:
        return environment().from_string(source)
    except TemplateSyntaxError as error:
        raise ValueError(f"line {error.lineno}: {error.message}") from None
    except RecursionError:
        raise ValueError("it is nested too deeply to compile") from None


def render_template(source: str, data: dict[str, Any]) -> str:
    """Render, stopping as soon as the output passes its limit."""
    chunks: list[str] = []
    length = 0
    stream: Iterator[str] = compile_template(source).generate(**data)
    for chunk in stream:
        length += len(chunk)
        if length > MAX_OUTPUT_LENGTH:
            raise TemplateLimitExceeded(f"output over {MAX_OUTPUT_LENGTH} characters")
        chunks.append(chunk)
    return "".join(chunks)
