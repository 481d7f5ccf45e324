"""CEL expressions: what they see, how they are checked, and how they run.

The library is Google's own CEL runtime (`cel-expr-python`, cel-cpp), chosen
for spec coverage and speed on our expressions (`bench/cel_libraries.py`).
"""

from __future__ import annotations

import functools
from typing import Any

MAX_EXPRESSION_LENGTH = 2048

# What every expression sees. `messages`, `app_state` and `agent` are the
# request's, as JSON-like data; the rest are conveniences.
VARIABLES = {
    "messages": "DYN",
    "app_state": "DYN",
    "agent": "DYN",
    "is_user_turn": "BOOL",
    "latest_user_text": "STRING",
    "latest_assistant_text": "STRING",
    "message_count": "INT",
}

# The result each kind of expression must have.
RESULT_TYPES = {"trigger": "BOOL", "query": "STRING"}


@functools.cache
def environment() -> Any:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    variables = {name: getattr(cel.Type, kind) for name, kind in VARIABLES.items()}
    return cel.NewEnv(variables=variables, extensions=[ext_strings.ExtStrings()])


@functools.lru_cache(maxsize=1024)
def compile_expression(source: str, kind: str) -> Any:
    """The compiled program; raises ValueError with the parse or type error. Cached by source."""
    from cel_expr_python import cel

    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ValueError(f"is {len(source)} characters; at most {MAX_EXPRESSION_LENGTH}")
    try:
        program = environment().compile(source)
    except RuntimeError as error:
        raise ValueError(str(error).removeprefix("INVALID_ARGUMENT: ").strip()) from None
    returned = program.return_type()
    expected = getattr(cel.Type, RESULT_TYPES[kind])
    if returned != expected and returned != cel.Type.DYN:
        raise ValueError(f"returns {returned.name()}; a {kind} expression must return {expected.name()}")
    return program


def evaluate_expression(source: str, kind: str, data: dict[str, Any]) -> Any:
    """Run an expression; raises ValueError with CEL's reason when it fails at run time."""
    from cel_expr_python import cel

    value = compile_expression(source, kind).eval(data=data)
    if value.type() == cel.Type.ERROR:
        raise ValueError(str(value.plain_value()))
    result = value.plain_value()
    wanted = bool if kind == "trigger" else str
    if not isinstance(result, wanted):
        raise ValueError(f"returned {type(result).__name__}, not {wanted.__name__}")
    return result
