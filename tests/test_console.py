"""The web console, in a real browser: Debian's Chromium, headless, against a keyed server with two tenants.

Every page is opened the way an operator would: signing in with a key, listing stores, filtering a store's
entries, running the playground and reading why each entry was injected, correcting an entry and seeing its
new version, erasing a user after the count, and the providers' outcomes. A key of one tenant sees nothing
of the other in any page; an agent key reads only; a key bound to a user sees that user only; an entry that
reads as markup stays text. A screenshot of each page is kept (build/artifacts/console, or the folder
`CONTEXTFOLD_SCREENSHOTS` names: `make console-screenshots` writes docs/console). The console's HTTP door
is checked without the browser too: its headers, and what it refuses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from contextfold import Client
from contextfold_server.console.gateway import SECURITY_HEADERS

from harness.browser import Browser, chromium
from harness.messages import user
from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, provider_fixtures, start_server
from tests.test_tenancy import keys

SCREENSHOTS = Path(os.environ.get("CONTEXTFOLD_SCREENSHOTS") or ROOT / "build" / "artifacts" / "console")
# What only the other tenant holds: no page of acme's may show it.
GLOBEX_MARK = "GLOBEX-ONLY"


@dataclass
class Keys:
    acme_admin: str
    acme_agent: str
    acme_bound: str
    globex_admin: str
    acme_admin_id: str


@pytest.fixture(scope="module")
def console_keys(postgres: Postgres) -> Keys:
    def create(*args: str) -> dict:
        return keys(postgres.url, "create", *args)

    admin = create("--namespace", "acme", "--role", "admin")
    return Keys(
        admin["key"],
        create("--namespace", "acme", "--role", "agent")["key"],
        create("--namespace", "acme", "--role", "agent", "--user-id", "ana")["key"],
        create("--namespace", "globex", "--role", "admin")["key"],
        admin["id"],
    )


@dataclass
class Console:
    server: ServerProcess
    url: str


@pytest.fixture(scope="module")
def console(postgres: Postgres, console_keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    log = tmp_path_factory.mktemp("console") / "server.log"
    server = start_server(
        log, "--database-url", postgres.url, "--auth", "keys", "--console-host", "127.0.0.1", "--console-port", "0"
    )
    port = re.search(r"console on http://127\.0\.0\.1:(\d+)/", server.log()).group(1)
    yield Console(server, f"http://127.0.0.1:{port}")
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def acme(console: Console, console_keys: Keys) -> Iterator[Client]:
    with Client(console.server.address, timeout=30, api_key=console_keys.acme_admin) as client:
        yield client


@pytest.fixture(scope="module")
def globex(console: Console, console_keys: Keys) -> Iterator[Client]:
    with Client(console.server.address, timeout=30, api_key=console_keys.globex_admin) as client:
        yield client


@pytest.fixture(scope="module")
def data(acme: Client, globex: Client) -> dict[str, list]:
    """Each tenant's stores and entries, and the other tenant's marked so no page of acme's may show them."""
    acme.create_store("pets", description="what users told the agent about their pets")
    acme.create_store("trips", default_ttl=30 * 86400)
    pets = acme.add_memories(
        "pets",
        [
            {"content": "Ana's dog is called Biscuit", "user_id": "ana", "metadata": {"topic": "dogs"}},
            {"content": "Ana feeds Biscuit twice a day", "user_id": "ana", "metadata": {"topic": "food"}},
            {"content": "Ben's cat is called Miso", "user_id": "ben", "metadata": {"topic": "cats"}},
        ],
    )
    trips = acme.add_memories("trips", [{"content": "Ben flies to Lisbon in May", "user_id": "ben"}])
    globex.create_store("globex-secrets")
    globex.add_memories("globex-secrets", [{"content": f"{GLOBEX_MARK}: Globex's dog is called Rex", "user_id": "ana"}])
    return {"pets": pets, "trips": trips}


@pytest.fixture(scope="module")
def tab() -> Iterator[Browser]:
    with chromium() as opened:
        yield opened


@pytest.fixture
def page(tab: Browser, console: Console, data) -> Iterator[Browser]:
    """The browser on the console's sign-in page, nobody signed in; no page may log an error (a script's, a
    Content-Security-Policy refusal), besides the API's refusals a test provokes."""
    tab.open(console.url + "/")
    tab.run("sessionStorage.clear()")
    tab.open("about:blank")
    tab.open(console.url + "/#/login")
    tab.element("#key")
    tab.console_errors()
    yield tab
    refused = f"{console.url}/api/"
    assert [error for error in tab.console_errors() if not error.startswith(refused)] == []


def sign_in(tab: Browser, key: str, who: str) -> None:
    tab.type("#key", key)
    tab.click("#sign-in")
    tab.wait_for_text("#whoami", who)


def visit(tab: Browser, route: str, heading: str) -> None:
    """Open a page of the console afresh (the key stays in the tab's session storage), once it has loaded."""
    base = tab.url.split("#")[0]
    tab.open("about:blank")
    tab.open(base + route)
    tab.wait_for_text("main h1, main .error", heading)


def body_text(tab: Browser) -> str:
    return tab.run("return document.body.innerText")


def shoot(tab: Browser, name: str) -> None:
    assert name in SHOTS
    path = tab.screenshot(SCREENSHOTS / f"{name}.png")
    assert path.stat().st_size > 10_000, "a page, not a blank"


# Signing in, stores


def test_signing_in_with_a_key_lists_the_tenants_stores_with_size_dimension_and_ttl(
    page: Browser, console_keys: Keys
) -> None:
    assert page.attribute("#key", "type") == "password"
    shoot(page, "sign-in")

    sign_in(page, console_keys.acme_admin, "acme · admin")
    wait_for(lambda: page.elements("#stores tbody tr"), 10, what="the stores")
    assert [page.attribute(f"#stores tbody tr:nth-child({n})", "data-store") for n in (1, 2)] == ["pets", "trips"]
    assert len(page.elements("#stores tbody tr")) == 2
    pets = page.texts("#stores tbody tr[data-store='pets'] td")
    assert pets[:5] == ["pets", "what users told the agent about their pets", "3", "384", "none"]
    trips = page.texts("#stores tbody tr[data-store='trips'] td")
    assert trips[2:5] == ["1", "384", "2592000 s"]
    assert GLOBEX_MARK not in body_text(page) and "globex-secrets" not in body_text(page)
    shoot(page, "stores")
    assert page.run("return document.cookie") == "", "the console sets no cookie"
    assert page.run("return sessionStorage.getItem('contextfold.key')") == console_keys.acme_admin


def test_a_wrong_key_is_refused_and_signing_out_forgets_the_key(page: Browser, console_keys: Keys) -> None:
    page.type("#key", "cfk_not-a-key")
    page.click("#sign-in")
    assert "UNAUTHENTICATED" in page.wait_for_text(".error", "not valid")
    assert page.run("return sessionStorage.getItem('contextfold.key')") is None

    sign_in(page, console_keys.acme_admin, "acme · admin")
    page.click("#sign-out")
    page.element("#key")
    assert page.run("return sessionStorage.getItem('contextfold.key')") is None


# A store's entries


def test_a_stores_entries_are_filtered_by_scope_and_metadata(page: Browser, console_keys: Keys, data) -> None:
    sign_in(page, console_keys.acme_admin, "acme · admin")
    visit(page, "#/store/pets", "pets")
    wait_for(lambda: len(page.elements("#entries tr.entry")) == 3, 10, what="the store's three entries")

    page.type("#filter-user", "ana")
    page.click("#apply-filters")
    wait_for(lambda: len(page.elements("#entries tr.entry")) == 2, 10, what="Ana's two entries")
    page.type("#filter-json", '{"topic": "food"}')
    page.click("#apply-filters")
    wait_for(lambda: len(page.elements("#entries tr.entry")) == 1, 10, what="Ana's entry about food")
    assert page.text("#entries tr.entry .content") == "Ana feeds Biscuit twice a day"
    assert page.attribute("#entries tr.entry", "data-id") == data["pets"][1].id
    shoot(page, "entries")

    page.type("#filter-json", '{"topic": ')
    page.click("#apply-filters")
    assert "filter: not JSON" in page.wait_for_text(".error", "INVALID_ARGUMENT")


def test_an_admin_corrects_an_entry_and_sees_its_new_version(page: Browser, acme: Client, console_keys: Keys) -> None:
    (entry,) = acme.add_memories("pets", [{"content": "Ana's parrot is called Kiwi", "user_id": "ana"}])
    sign_in(page, console_keys.acme_admin, "acme · admin")
    visit(page, "#/store/pets", "pets")
    row = f"#entries tr.entry[data-id='{entry.id}']"
    page.element(row)
    page.click(f"{row} button.correct")
    page.type(".correction", "Ana's parrot is called Mango")
    page.click("button.save")
    page.wait_for_text(f"{row} .content", "Mango")

    page.click(f"{row} button.versions")
    version = page.wait_for_text(".versions-list", "version 1")
    assert "Ana's parrot is called Kiwi" in version, "the version the correction replaced"
    assert f"by key {console_keys.acme_admin_id}" in version, "who replaced it"
    stored = acme.get_memory(entry.id)
    assert stored.content == "Ana's parrot is called Mango" and stored.etag in version
    shoot(page, "versions")
    # A correction applies to the version it was read at: made from a stale page, it is refused.
    stale = httpx.post(
        f"{page.url.split('#')[0]}api/MemoryService/UpdateMemory",
        json={"memory": {"id": entry.id, "content": "Ana's parrot is called Pip", "etag": entry.etag}},
        headers={"authorization": f"Bearer {console_keys.acme_admin}"},
    )
    assert stale.status_code == 409 and stale.json()["reason"] == "ETAG_MISMATCH"
    assert acme.get_memory(entry.id).content == "Ana's parrot is called Mango"


# Playground


def test_the_playground_injects_a_conversation_and_explains_each_candidate(
    page: Browser, console_keys: Keys, acme: Client, data
) -> None:
    sign_in(page, console_keys.acme_admin, "acme · admin")
    page.click("#nav-playground")
    page.type("#conversation", "user: I'm back from the vet.\nassistant: How did it go?\nuser: What is my dog called?")
    page.type("#stores-input", "pets")
    page.type("#user-id", "ana")
    assert page.elements("#agent-id"), "the playground takes an agent_id as it takes a user_id"
    page.type("#max-entries", "1")
    page.click("#run")

    biscuit = data["pets"][0]
    injected = page.wait_for_text("#folded .injected", "Biscuit")
    assert "Ana's dog is called Biscuit" in injected and "injected by memory" in injected
    candidate = f"#candidates tr.candidate[data-id='{biscuit.id}']"
    assert page.attribute(candidate, "data-verdict") == "injected"
    cells = page.texts(f"{candidate} td")
    assert cells[0] == "1" and float(cells[3]) > 0.3, "ranked first, with its similarity"
    signals = {part.rsplit(" ", 1)[0] for part in cells[4].split("\n")}
    assert {"lead", "words", "neighbour", "speaker", "date"} <= signals
    other = page.attribute("#candidates tr.candidate:not([data-verdict='injected'])", "data-verdict")
    assert other == "ranked below", "the other of Ana's entries, below max entries"
    shown = page.texts("#candidates tr.candidate td:nth-child(2) code")
    anas = {memory.id for memory in acme.list_memories("pets", scope={"user_id": "ana"})}
    assert shown[0] == biscuit.id and set(shown) == anas, "every one of Ana's entries weighed, no one else's"
    assert "injected" in page.text("#sources tr.source[data-source='memory']")
    assert page.elements("#stages .bar[data-stage='embed']") and page.elements("#stages .bar[data-stage='total']")
    # The summary's total and the Sources table's counts agree: the difference is the separator, said.
    summary = page.text("#report-summary")
    total = re.search(
        r"tokens injected\s+(\d+)(?: \((\d+) from the sources, (\d+) in the separators before them\))?", summary
    )
    assert total is not None, summary
    if total.group(2):
        assert int(total.group(1)) == int(total.group(2)) + int(total.group(3)), summary
    assert total.group(2) is not None, "one block after the message's text: a separator of its own"
    shoot(page, "playground")


# Erasure


def test_erasing_a_user_shows_the_count_first_and_erases_after_the_confirmation(
    page: Browser, acme: Client, globex: Client, console_keys: Keys
) -> None:
    acme.add_memories("pets", [{"content": f"Cleo's note {n}", "user_id": "cleo"} for n in range(2)])
    acme.add_memories("trips", [{"content": "Cleo sails to Crete", "user_id": "cleo"}])
    globex.add_memories("globex-secrets", [{"content": "Globex's Cleo", "user_id": "cleo"}])
    sign_in(page, console_keys.acme_admin, "acme · admin")
    page.click("#nav-erase")
    page.type("#erase-user", "cleo")
    page.click("#erase-count-button")
    assert page.wait_for_text("#erase-count", "3") == "3"
    assert page.attribute("#erase-button", "disabled") == "true", "not before the confirmation"
    assert acme.erase_memories(scope={"user_id": "cleo"}, validate_only=True) == 3, "counting erased nothing"
    shoot(page, "erase")

    page.click("#erase-confirm")
    page.click("#erase-button")
    assert page.wait_for_text("#erase-result", "Erased") == "Erased 3 entries, with their versions."
    assert acme.erase_memories(scope={"user_id": "cleo"}, validate_only=True) == 0
    assert [m.content for m in globex.list_memories("globex-secrets", scope={"user_id": "cleo"})] == ["Globex's Cleo"]
    assert len(list(acme.list_memories("pets"))) >= 3, "the others' entries stay"


# Providers


def test_the_providers_page_shows_each_providers_recent_outcomes(
    page: Browser, console_keys: Keys, acme: Client, globex: Client
) -> None:
    with provider_fixtures() as ports:
        acme.register_provider("clock", f"127.0.0.1:{ports['scripted']}", priority=2)
        acme.register_provider("stalled", f"127.0.0.1:{ports['hanging']}", timeout=0.2)
        globex.register_provider("globex-feed", f"127.0.0.1:{ports['scripted']}")
        try:
            for _ in range(2):
                acme.inject([user("what time is it?")], max_entries=0, app_state={"texts": {"clock": "It is noon."}})
            sign_in(page, console_keys.acme_admin, "acme · admin")

            page.click("#nav-providers")

            def shown() -> bool:
                page.click("#refresh")
                text = page.wait_for_text("#providers", "clock")
                return "injected: 2 calls" in text and "timeout: 2 calls" in text

            wait_for(shown, 20, what="both providers' outcomes on the page", interval=0.5)
            assert "no answer within 0.200s" in page.text("#providers tr.provider[data-name='stalled']")
            assert "globex-feed" not in body_text(page)
            shoot(page, "providers")
        finally:
            for name in ("clock", "stalled"):
                acme.delete_provider(name)
            globex.delete_provider("globex-feed")


# Keys: tenants, roles, scopes


def test_no_page_of_one_tenant_shows_anything_of_another(
    page: Browser, console_keys: Keys, acme: Client, globex: Client
) -> None:
    globex.register_provider("globex-provider", "127.0.0.1:1")
    try:
        sign_in(page, console_keys.acme_admin, "acme · admin")
        for route, heading in (("#/stores", "Stores"), ("#/store/pets", "pets"), ("#/store/trips", "trips")):
            visit(page, route, heading)
            page.element("#entries, #stores")
            assert GLOBEX_MARK not in body_text(page) and "globex" not in body_text(page).lower(), route
        visit(page, "#/providers", "Providers")
        assert "globex" not in body_text(page).lower()

        visit(page, "#/store/globex-secrets", "globex-secrets")
        assert "NOT_FOUND" in page.wait_for_text(".error", "globex-secrets"), "another tenant's store does not exist"
        page.click("#nav-playground")
        page.type("#conversation", "user: What is the dog called?")
        page.click("#run")
        page.wait_for_text("#playground-result", "Candidates")
        assert GLOBEX_MARK not in body_text(page), "the playground searches the key's tenant only"
        page.click("#nav-erase")
        page.type("#erase-user", "ana")
        page.click("#erase-count-button")
        anas = acme.erase_memories(scope={"user_id": "ana"}, validate_only=True)
        assert page.wait_for_text("#erase-count", "") == str(anas), "acme's entries of Ana's, not globex's"
    finally:
        globex.delete_provider("globex-provider")


def test_an_agent_key_reads_its_tenant_and_cannot_correct_or_erase(
    page: Browser, console: Console, console_keys: Keys, acme: Client, data
) -> None:
    sign_in(page, console_keys.acme_agent, "acme · agent")
    assert "read-only" in page.text("#whoami")
    assert page.run("return document.getElementById('nav-erase').hidden") is True
    assert page.run("return document.getElementById('nav-providers').hidden") is True
    visit(page, "#/store/pets", "pets")
    page.element("#entries tr.entry")
    assert page.elements("button.correct") == [] and page.elements("button.versions")

    headers = {"authorization": f"Bearer {console_keys.acme_agent}", "content-type": "application/json"}
    for method, body in (
        ("MemoryService/EraseMemories", {"scope": {"userId": "ana"}}),
        ("MemoryService/EraseMemories", {"scope": {"userId": "ana"}, "validateOnly": True}),
        ("MemoryService/UpdateMemory", {"memory": {"id": data["pets"][0].id, "content": "x"}}),
    ):
        refused = httpx.post(f"{console.url}/api/{method}", json=body, headers=headers)
        assert refused.status_code == 403
        assert refused.json()["reason"] == "CONSOLE_READ_ONLY" and refused.json()["code"] == "PERMISSION_DENIED"
    assert acme.get_memory(data["pets"][0].id).content == "Ana's dog is called Biscuit", "nothing changed"
    assert acme.erase_memories(scope={"user_id": "ana"}, validate_only=True) >= 2, "nothing erased"


def test_a_key_bound_to_a_user_sees_that_user_only(page: Browser, console_keys: Keys) -> None:
    sign_in(page, console_keys.acme_bound, "user ana")
    visit(page, "#/store/pets", "pets")
    wait_for(lambda: page.elements("#entries tr.entry"), 10, what="Ana's entries")
    assert "Ben's cat" not in body_text(page) and "Miso" not in body_text(page)
    page.type("#filter-user", "ben")
    page.click("#apply-filters")
    assert "PERMISSION_DENIED" in page.wait_for_text(".error", "")
    page.click("#nav-playground")
    page.type("#conversation", "user: What is the cat called?")
    page.click("#run")
    page.wait_for_text("#playground-result", "Candidates")
    assert "Miso" not in body_text(page), "Ben's entry is not Ana's key's to see"


# Safe by construction


def test_an_entry_written_as_markup_renders_as_text(page: Browser, console_keys: Keys, acme: Client) -> None:
    hostile = '<script>window.__owned = 1</script><img src=x onerror="window.__owned = 2"><b>bold?</b>'
    (entry,) = acme.add_memories("pets", [{"content": hostile, "user_id": "eve", "metadata": {"note": "<i>x</i>"}}])
    sign_in(page, console_keys.acme_admin, "acme · admin")
    visit(page, "#/store/pets", "pets")
    page.type("#filter-user", "eve")
    page.click("#apply-filters")
    assert page.wait_for_text(f"#entries tr.entry[data-id='{entry.id}'] .content", "script") == hostile
    assert page.run("return document.querySelectorAll('main script, main img, main b, main i').length") == 0
    page.click("#nav-playground")
    page.type("#conversation", "user: window owned script bold")
    page.type("#user-id", "eve")
    page.click("#run")
    page.wait_for_text("#candidates", "onerror")
    assert page.run("return document.querySelectorAll('main script, main img, main b').length") == 0
    assert page.run("return window.__owned === undefined") is True
    shoot(page, "markup-as-text")


def test_the_consoles_door_sends_a_strict_policy_and_refuses_what_a_page_of_another_site_could_send(
    console: Console, console_keys: Keys
) -> None:
    for path in ("/", "/console.js", "/console.css", "/no-such-page"):
        answer = httpx.get(console.url + path)
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff" and "set-cookie" not in answer.headers
    page_source = httpx.get(console.url + "/").text
    with httpx.Client() as kept_alive:
        head = kept_alive.head(console.url + "/")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(page_source.encode())
        assert kept_alive.get(console.url + "/console.css").status_code == 200, "the connection carries on"
    assert re.findall(r"<script(?![^>]*\bsrc=)", page_source) == [] and " style=" not in page_source

    key = {"authorization": f"Bearer {console_keys.acme_admin}"}
    api = f"{console.url}/api/MemoryService/ListStores"
    assert httpx.post(api, json={}, headers=key).status_code == 200
    # Brought to another port by a tunnel (`ssh -L`, `kubectl port-forward`), a loopback name still answers.
    port = console.url.rsplit(":", 1)[1]
    for tunnelled in ("localhost:9000", "127.0.0.1:18080", "[::1]:8443"):
        assert httpx.post(api, json={}, headers={**key, "host": tunnelled}).status_code == 200, tunnelled
    as_json = {**key, "content-type": "application/json"}
    refusals = {
        "another origin": (httpx.post(api, json={}, headers={**key, "origin": "https://evil.example"}), 403),
        "a cross-site fetch": (httpx.post(api, json={}, headers={**key, "sec-fetch-site": "cross-site"}), 403),
        "a form's body": (httpx.post(api, content=b"{}", headers={**key, "content-type": "text/plain"}), 415),
        "another host name": (httpx.post(api, json={}, headers={**key, "host": "evil.example"}), 421),
        "another name on the port": (httpx.post(api, json={}, headers={**key, "host": f"evil.example:{port}"}), 421),
        "no key": (httpx.post(api, json={}), 401),
        "a GET": (httpx.get(api, headers=key), 405),
        "a method it does not call": (
            httpx.post(f"{console.url}/api/MemoryService/ImportMemories", headers=as_json),
            404,
        ),
        "a body over 1 MiB": (httpx.post(api, content=b" " * (1024 * 1024 + 1), headers=as_json), 413),
    }
    for what, (answer, status) in refusals.items():
        assert answer.status_code == status, (what, answer.status_code, answer.text)
    malformed = httpx.post(api, content=b'{"pageSize": "many"}', headers={**key, "content-type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["reason"] == "MALFORMED_JSON"
    named = httpx.post(f"{console.url}/api/MemoryService/ListMemories", json={"store": ""}, headers=key)
    assert named.status_code == 400
    assert named.json()["code"] == "INVALID_ARGUMENT" and named.json()["fieldViolations"][0]["field"] == "store"
    assert "Traceback" not in console.server.log() and '"INTERNAL"' not in console.server.log()


def test_the_console_is_off_unless_a_port_is_given(server: ServerProcess) -> None:
    assert "console on" not in server.log()


def test_the_docs_show_each_page_with_the_tests_screenshot_and_the_policy_as_served() -> None:
    docs = (ROOT / "docs" / "console.md").read_text()
    shown = re.findall(r"!\[[^\]]*\]\(console/([a-z-]+)\.png\)", docs)
    assert sorted(shown) == sorted(SHOTS), "every screenshot a test takes, and no other"
    for name in shown:
        assert (ROOT / "docs" / "console" / f"{name}.png").stat().st_size > 10_000, name
    policy = dict(SECURITY_HEADERS)["content-security-policy"]
    assert " ".join(policy.split()) in " ".join(docs.replace("`", "").split())


SHOTS = ("sign-in", "stores", "entries", "versions", "playground", "providers", "erase", "markup-as-text")
