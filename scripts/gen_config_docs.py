"""Write `docs/configuration.md` from `contextfold serve`'s own option parser, so the reference
is never written twice: every option with its environment variable, its default and its help,
then the settings read from the environment only.

`--check` fails when the page checked in differs from what the parser says (CI runs it in
`make lint`), so an option added or changed without `make config-docs` cannot land. The parser
is built with an empty environment: the page shows the defaults, not this machine's settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contextfold_server.config import ENVIRONMENT_ONLY, option_parser

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"

INTRODUCTION = """\
# Configuration

Generated from `contextfold serve`'s option parser by `make config-docs` (CI fails when it is
stale): do not edit it by hand. `contextfold serve --help` prints the same.

Every option has an environment variable of its own, read when the option is not given, so a
container is configured by its environment alone. Secrets come from the environment only (an
option would show in `ps`): they are listed last. The other commands (`contextfold keys`,
`contextfold tenants`) act as the schema owner: `--database-url`, else
`CONTEXTFOLD_DATABASE_MIGRATION_URL`, else `CONTEXTFOLD_DATABASE_URL`; each has its own `--help`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(action: argparse.Action) -> str:
    shown = getattr(action, "shown_default", None)
    if shown is not None:
        return shown
    if action.default is None or action.default == "":
        return "none"
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    # The variable has a column of its own.
    text = text.removesuffix(f"(${getattr(action, 'environment', '')})").strip()
    if action.choices:
        text = f"one of {', '.join(f'`{choice}`' for choice in action.choices)}" + (f": {text}" if text else "")
    return text


def render() -> str:
    parser = option_parser(environ={})
    rows = ["| option | environment | default | what it sets |", "| --- | --- | --- | --- |"]
    for action in parser._actions:
        variable = getattr(action, "environment", None)
        if variable is None:
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        if isinstance(action, argparse._AppendAction):
            flags += " (repeatable)"
        rows.append(f"| {flags} | `{variable}` | {_cell(_default(action))} | {_cell(_help(action))} |")
    secrets = ["| environment only | what it is |", "| --- | --- |"]
    secrets += [f"| `{name}` | {_cell(what)} |" for name, what in ENVIRONMENT_ONLY.items()]
    return "\n".join(
        [INTRODUCTION, "## `contextfold serve`", "", *rows, "", "## From the environment only", "", *secrets, ""]
    )


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--check", action="store_true", help="fail when the page checked in is stale")
    check = arguments.parse_args().check
    page = render()
    if check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `make config-docs`", file=sys.stderr)
            return 1
        print("the configuration reference is current")
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
