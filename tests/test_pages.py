"""Every command the README and the pages in docs/ print is run by `make test` as printed, or says why
it cannot be; the ones no other test runs are run here, in the order a newcomer meets them.

A shell block is run by the test that takes it with `pages.printed(page, words)`: this module reads
every test module for those calls. What a page prints as an example (a host such as
`new-server:50051`, a port, an id) is replaced by what the test has, and each such replacement is
stated where it is made (`pages.replacing`); nothing else in a command is changed.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from contextfold import Client, NotFound, Unauthenticated

from harness.servers import Postgres, ServerProcess, free_port, serving, serving_printed, start_server

from .pages import (
    FENCE,
    PAGES,
    ROOT,
    SHELL,
    blocks,
    listening,
    printed,
    replacing,
    run_printed,
    running_printed,
    section,
)

# Blocks no test runs, each with why: what `make test` cannot have here.
NOT_RUN = {
    ("README.md", "make test"): "make test is the suite that would run it (make run, its other line, is run here)",
    ("docs/performance.md", "make bench"): "benchmarks take minutes to hours (CI runs make bench-quick)",
    ("docs/console.md", "--console-host 0.0.0.0"): "it listens on every interface; tests listen on loopback only",
    ("docs/deploy.md", "docker build"): "it needs a Docker engine (test_deploy runs the image's entry point)",
    ("docs/deploy.md", "kubectl exec"): "it needs a Kubernetes cluster",
    ("docs/deploy.md", "kubectl create secret"): "it needs a Kubernetes cluster (test_deploy checks what the directory"
    " holds)",
    ("docs/deploy.md", "deploy/cloudnative-pg/cluster.yaml"): "it needs a Kubernetes cluster with the CloudNativePG"
    " operator (test_deploy applies the patch and checks what it points at)",
}


def taken_by_tests() -> dict[tuple[str, str], str]:
    """Every `printed(page, words)` call in the test modules, with the test module making it."""
    calls = {}
    for module in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "printed"
                and len(node.args) == 2
                and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in node.args)
            ):
                calls[(node.args[0].value, node.args[1].value)] = module.name
    return calls


def test_every_code_block_names_its_language() -> None:
    """So that no command hides from the walk below in a block marked as nothing."""
    unnamed = [
        f"{page}: {block['body'].splitlines()[0] if block['body'] else ''}"
        for page, text in PAGES.items()
        for block in FENCE.finditer(text)
        if not block["language"]
    ]
    assert not unnamed, unnamed


def test_every_shell_block_on_every_page_is_run_by_a_test_or_says_why_not() -> None:
    taken = taken_by_tests()
    reasons = dict(NOT_RUN)
    for (page, words), module in taken.items():
        assert page in PAGES, f"{module} takes a block of {page}, which is not a page"
        assert [block for block in blocks(PAGES[page], SHELL) if words in block], f"{module}: {page}: {words!r}"
    for (page, words), reason in reasons.items():
        assert len([block for block in blocks(PAGES[page], SHELL) if words in block]) == 1, (page, words)
        assert (page, words) not in taken, f"{page}: {words!r} is run, and marked as not run ({reason})"
    unaccounted = [
        f"{page}:\n{block}"
        for page, text in PAGES.items()
        for block in blocks(text, SHELL)
        if not any(page == taker_page and words in block for taker_page, words in [*taken, *reasons])
    ]
    assert not unaccounted, "\n".join(unaccounted)
    assert len(taken) >= 20, sorted(taken)


# What a newcomer runs, in the order they meet it: a server of the tests' own, fresh, as `make run`
# leaves one (open, on this machine), and a folder to work in, holding what the pages' commands name.


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("newcomer-server")) as process:
        yield process


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A folder laid out as the checkout is for the commands (its .venv and examples), to write in."""
    for name in (".venv", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def pattern(shown: str, ids: dict[str, str]) -> str:
    """A regular expression for a shown text with `…` in it; an id placeholder seen before stands for
    the id it matched then, a new one is bound by the match (`bind`)."""
    parts, named = [], set()
    for piece in re.split(r"([0-9a-f]{8}-…|…)", shown):
        if piece == "…":
            parts.append(".*?")
        elif piece in ids:
            parts.append(re.escape(ids[piece]))
        elif piece.endswith("-…"):
            parts.append(f"(?P=id_{piece[:8]})" if piece in named else f"(?P<id_{piece[:8]}>[0-9a-f-]{{36}})")
            named.add(piece)
        else:
            parts.append(re.escape(piece))
    return "".join(parts)


def bind(shown: str, printed_text: str, ids: dict[str, str]) -> None:
    """Record the ids a shown text's placeholders matched in what was printed."""
    match = re.fullmatch(pattern(shown, ids), printed_text, re.S)
    assert match, f"printed:\n{printed_text}\nthe page shows:\n{shown}"
    for name, value in match.groupdict().items():
        ids.setdefault(f"{name[3:]}-…", value)


def bind_json(shown: object, printed_value: object, ids: dict[str, str]) -> None:
    """Fails unless what a command printed is what the page shows of it: every key shown, with its value
    (the page may leave keys out); `…` in a shown string stands for anything, and an id shown as
    `0b4514ce-…` for one id, bound where the page first shows it and the same wherever it shows it
    again (`bind`); a score within 0.01 (the model's arithmetic differs in its last digits between CPUs)."""
    if isinstance(shown, dict):
        assert isinstance(printed_value, dict), (shown, printed_value)
        for key, value in shown.items():
            assert key in printed_value, f"{key!r} is not in {printed_value}"
            bind_json(value, printed_value[key], ids)
    elif isinstance(shown, list):
        assert isinstance(printed_value, list) and len(shown) == len(printed_value), (shown, printed_value)
        for a, b in zip(shown, printed_value, strict=True):
            bind_json(a, b, ids)
    elif isinstance(shown, str) and "…" in shown:
        assert isinstance(printed_value, str), (shown, printed_value)
        bind(shown, printed_value, ids)
    elif isinstance(shown, float):
        assert isinstance(printed_value, float) and abs(shown - printed_value) <= 0.01, (shown, printed_value)
    else:
        assert shown == printed_value, (shown, printed_value)


def test_five_minutes_with_it_runs_as_printed_and_prints_what_the_readme_shows(
    fresh: ServerProcess, checkout: Path
) -> None:
    """The README's first steps, on a server as new as a newcomer's: the CLI's store, entries and
    search, the Python program, then the CLI's Inject of a conversation in a file. The ids each prints
    are the same entries wherever the README shows them again."""
    five = section("Five minutes with it")
    shown_json = blocks(five, "json")
    ids: dict[str, str] = {}

    added = run_printed(
        printed("README.md", "memory add --store preferences"), checkout, CONTEXTFOLD_ADDRESS=fresh.address
    )
    # Three commands, three JSON documents: the store, the entries, the search (what the page shows).
    store, entries, search = json_documents(added.stdout)
    assert store["name"] == "preferences" and len(entries) == 3
    bind_json(json.loads(shown_json[0]), search, ids)

    (program,) = blocks(five, "python")
    python = run_printed(
        f"{sys.executable} - <<'PY'\n{replacing(program, {'localhost:50051': fresh.address})}PY\n", checkout
    )
    bind(blocks(five, "text")[0], python.stdout, ids)

    before = set(checkout.iterdir())
    injected = run_printed(printed("README.md", "inject --file -"), checkout, CONTEXTFOLD_ADDRESS=fresh.address)
    assert set(checkout.iterdir()) == before, "the README's walk leaves nothing in the checkout"
    bind_json(json.loads(shown_json[1]), json.loads(injected.stdout), ids)
    stderr = re.search(r"and on stderr: `([^`]+)`", five).group(1)
    assert stderr in injected.stderr.splitlines(), injected.stderr
    assert set(ids) == {"0b4514ce-…", "0fe65941-…"} and len(set(ids.values())) == 2, ids


def json_documents(text: str) -> list[object]:
    """The JSON documents a block's commands printed one after another."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


def test_make_run_serves_as_printed(tmp_path: Path) -> None:
    """The README's first command: the server, open on this machine, its own Postgres and model."""
    (line, _) = printed("README.md", "make run").splitlines()
    with serving_printed(line, tmp_path) as server, Client(server.address, timeout=30) as cf:
        cf.create_store("first")
        cf.add_memories("first", ["The newcomer's first entry"])
        (found,) = cf.search_memories("newcomer", stores=["first"])
        assert found.memory.content == "The newcomer's first entry"
        assert "the service is OPEN (--auth none)" in server.log()


def test_the_console_starts_as_printed(tmp_path: Path) -> None:
    """`make run ARGS="--console-port …"`: the same server, with the console's pages on loopback."""
    command = replacing(
        printed("docs/console.md", 'make run ARGS="--console-port'), {"--console-port 8080": "--console-port 0"}
    )
    with serving_printed(command, tmp_path) as server:
        port = re.search(r"console on http://localhost:(\d+)/", server.log()).group(1)
        with urllib.request.urlopen(f"http://localhost:{port}/", timeout=10) as page:
            assert page.status == 200 and "<html" in page.read().decode().lower()


def test_a_provider_registered_as_printed_is_asked_by_every_inject(fresh: ServerProcess, checkout: Path) -> None:
    """The providers page's clock, started and registered as printed, answers the README's conversation."""
    port = free_port()
    on_a_free_port = {"127.0.0.1:50061": f"127.0.0.1:{port}"}
    clock = replacing(printed("docs/providers.md", "examples/providers/clock.py"), on_a_free_port)
    with running_printed(clock, checkout, listening(port)):
        try:
            register = replacing(printed("docs/providers.md", "providers register clock"), on_a_free_port)
            done = run_printed(register, checkout, CONTEXTFOLD_ADDRESS=fresh.address)
        finally:
            with Client(fresh.address) as cf, contextlib.suppress(NotFound):
                cf.delete_provider("clock")
    registered, folded = json_documents(done.stdout)
    assert registered["name"] == "clock" and registered["target"] == f"127.0.0.1:{port}", registered
    sources = [block["injected"]["source"] for block in folded[-1]["content"] if "injected" in block]
    assert "clock" in sources, folded
    assert "provider clock: " in done.stderr, done.stderr


def test_erasing_a_user_as_printed_counts_then_erases_only_theirs(fresh: ServerProcess, checkout: Path) -> None:
    with Client(fresh.address) as cf:
        cf.create_store("erasing")
        cf.add_memories(
            "erasing",
            [
                {"content": "Ada's first note", "user_id": "ada"},
                {"content": "Ada's second note", "user_id": "ada"},
                {"content": "Bob's note", "user_id": "bob"},
            ],
        )
        done = run_printed(
            printed("docs/lifecycle.md", "memory erase --user-id ada"), checkout, CONTEXTFOLD_ADDRESS=fresh.address
        )
        assert json_documents(done.stdout) == [{"would_erase_count": 2}, {"erased_count": 2}]
        assert [m.content for m in cf.list_memories("erasing")] == ["Bob's note"]
        cf.delete_store("erasing", force=True)


def test_moving_a_namespace_as_printed_copies_every_store_and_entry(
    fresh: ServerProcess, checkout: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with Client(fresh.address) as cf:
        cf.create_store("moving", description="what moves")
        cf.add_memories("moving", [f"Fact {n} worth keeping" for n in range(5)])
        with serving(tmp_path_factory.mktemp("new-server")) as target, Client(target.address) as moved:
            commands = replacing(
                printed("docs/lifecycle.md", "memory import memories.jsonl"), {"new-server:50051": target.address}
            )
            run_printed(commands, checkout, CONTEXTFOLD_ADDRESS=fresh.address)
            assert (checkout / "memories.jsonl").stat().st_size > 0
            stores = {store.name: store.description for store in cf.list_stores()}
            assert {store.name: store.description for store in moved.list_stores()} == stores
            for store in stores:
                assert sorted(m.id for m in moved.list_memories(store)) == sorted(m.id for m in cf.list_memories(store))
            (first,) = moved.search_memories("Fact 3 worth keeping", stores=["moving"], max_results=1)
            assert first.memory.content == "Fact 3 worth keeping"
        cf.delete_store("moving", force=True)


def test_keys_and_quotas_as_printed_open_and_close_the_service(postgres: Postgres, tmp_path: Path) -> None:
    """The tenancy page's keys (the id it revokes is one made for it first) and the deploy page's quota,
    on the service's Postgres as an operator runs them; a server on that Postgres honours each."""
    owner = {"CONTEXTFOLD_DATABASE_URL": postgres.url}
    made = run_printed(".venv/bin/contextfold keys create --namespace acme --role agent", ROOT, **owner)
    doomed = json.loads(made.stdout)
    done = run_printed(replacing(printed("docs/tenancy.md", "keys revoke"), {"3f9c2a1b": doomed["id"]}), ROOT, **owner)
    admin, agent, listed, revoked = json_documents(done.stdout)
    assert (admin["role"], agent["role"]) == ("admin", "agent") and admin["namespace"] == agent["namespace"] == "acme"
    assert {key["id"] for key in listed} >= {admin["id"], agent["id"], doomed["id"]}
    assert revoked == {"revoked": doomed["id"]}

    quota = run_printed(printed("docs/deploy.md", "tenants set-quota acme"), ROOT, **owner)
    (_, shown) = json_documents(quota.stdout)
    assert shown["quota"]["entries"] == 1_000_000 and shown["quota"]["writes_per_second"] == 50, shown

    server = start_server(tmp_path / "server.log", "--database-url", postgres.url, "--auth", "keys")
    try:
        with Client(server.address, api_key=admin["key"]) as cf:
            cf.create_store("acme-notes")
        with Client(server.address, api_key=agent["key"]) as cf:
            assert cf.inject([{"role": "user", "content": [{"text": "hello"}]}], stores=["acme-notes"]).messages
        with Client(server.address, api_key=doomed["key"]) as cf, pytest.raises(Unauthenticated):
            list(cf.list_stores())
    finally:
        assert server.stop() == 0, server.log()
