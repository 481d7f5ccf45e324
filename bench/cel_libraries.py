"""Which CEL library: spec coverage and speed, measured on the expressions contextfold users write.

Runs each of our expressions (the seed's trigger and query examples, and the
conveniences) in every CEL library for Python that is installed, checks the
result, and times evaluation. contextfold uses the winner, Google's cel-cpp
runtime (`cel-expr-python`).

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python -m bench.cel_libraries
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, cast

CONTEXT = {
    "messages": [
        {"role": "user", "content": [{"text": "Hi"}]},
        {"role": "assistant", "content": [{"text": "Which editor do you use?"}]},
        {"role": "user", "content": [{"text": "Do you remember my editor?"}]},
        {"role": "assistant", "content": [{"text": "Checking."}]},
        {"role": "user", "content": [{"text": "Please recall it"}]},
    ],
    "app_state": {"recallEnabled": True},
    "agent": {"id": "a-1", "name": "helper"},
    "is_user_turn": True,
    "latest_user_text": "Please recall it",
    "latest_assistant_text": "Checking.",
    "message_count": 5,
}

EXPRESSIONS: list[tuple[str, Any]] = [
    ("messages.size() >= 4", True),
    ("has(app_state.recallEnabled) && app_state.recallEnabled == true", True),
    ("is_user_turn && message_count > 2", True),
    (
        "latest_user_text.matches('(?i)\\\\b(remember|recall|last time|previously)\\\\b') ? latest_user_text : ''",
        "Please recall it",
    ),
    ("[latest_assistant_text, latest_user_text].filter(t, t != '').join('\\n')", "Checking.\nPlease recall it"),
    (
        "messages.exists(m, m.role == 'assistant' && m.content.exists(b, 'text' in b && b.text.contains('editor')))",
        True,
    ),
    ("messages.filter(m, m.role == 'user').size() == 3", True),
    ("agent.name.startsWith('help') ? agent.id : ''", "a-1"),
]

Runner = Callable[[str], Callable[[], Any]]


def cel_cpp() -> Runner:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    env = cel.NewEnv(variables=dict.fromkeys(CONTEXT, cel.Type.DYN), extensions=[ext_strings.ExtStrings()])

    def prepare(source: str) -> Callable[[], Any]:
        program = env.compile(source)
        return lambda: program.eval(data=CONTEXT).plain_value()

    return prepare


def cel_rust() -> Runner:
    import cel

    context = cel.Context()
    for name, value in CONTEXT.items():
        context.add_variable(name, value)

    def prepare(source: str) -> Callable[[], Any]:
        program = cel.compile(source)
        return lambda: program.execute(context)

    return prepare


def cel_python() -> Runner:
    import celpy

    env = celpy.Environment()
    # The context is a JSON object, so its CEL value is a map of names, as `evaluate` takes.
    activation = cast(dict[str, Any], celpy.json_to_cel(CONTEXT))

    def prepare(source: str) -> Callable[[], Any]:
        program = env.program(env.compile(source))
        return lambda: program.evaluate(activation)

    return prepare


LIBRARIES = {
    "cel-expr-python (cel-cpp)": cel_cpp,
    "common-expression-language (Rust)": cel_rust,
    "cel-python (pure Python)": cel_python,
}


def measure(make: Callable[[], Runner], runs: int) -> tuple[int, float | None, list[str]]:
    prepare = make()
    passed, timings, failures = 0, [], []
    for source, expected in EXPRESSIONS:
        try:
            run = prepare(source)
            result = run()
            if result != expected:
                failures.append(f"{source[:40]}: got {result!r}")
                continue
        except Exception as error:  # noqa: BLE001 - a library that cannot run an expression scores a miss.
            failures.append(f"{source[:40]}: {type(error).__name__}")
            continue
        passed += 1
        started = time.perf_counter()
        for _ in range(runs):
            run()
        timings.append((time.perf_counter() - started) / runs * 1e6)
    return passed, statistics.median(timings) if timings else None, failures


def main() -> None:
    print(f"{'library':<36} {'passed':>8} {'median µs':>10}")
    for name, make in LIBRARIES.items():
        try:
            passed, median, failures = measure(make, runs=500)
        except ImportError:
            print(f"{name:<36} {'not installed':>19}")
            continue
        print(f"{name:<36} {passed:>5}/{len(EXPRESSIONS)} {median or 0:>10.1f}")
        for failure in failures:
            print(f"    missed {failure}")


if __name__ == "__main__":
    main()
