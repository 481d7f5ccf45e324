"""The Python client's options are typed: mypy catches a misspelt or mistyped keyword in a caller's
code, and the client refuses one at run time too (before anything is sent)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from contextfold import AsyncClient, Client
from contextfold.strands import ContextInjection

from harness.servers import ROOT

CALLER = """\
from contextfold import AsyncClient, Client
from contextfold.strands import ContextInjection


async def use(cf: Client, acf: AsyncClient) -> None:
    cf.inject([], stores=["prefs"], max_entries=3, trigger="userTurn", filter={"topic": "food"})
    cf.search_memories("tea", stores=["prefs"], max_results=5, ranking="hybrid")
    await acf.inject([], scope={"user_id": "ana"}, format="bullets")
    ContextInjection(max_entries=2, trigger="everyTurn", scope=lambda agent: {"user_id": "ana"})
    cf.inject([], max_entrys=3)
    cf.search_memories("tea", max_results="5")
    await acf.inject([], format="yaml")
    ContextInjection(app_state={})
"""


def test_mypy_checks_the_keywords_of_inject_and_search_memories(tmp_path: Path) -> None:
    (tmp_path / "caller.py").write_text(CALLER)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "caller.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MYPYPATH": str(ROOT / "client" / "python")},
    )  # fmt: skip
    flagged = sorted({int(line) for line in re.findall(r"^caller\.py:(\d+): error", done.stdout, flags=re.M)})
    assert flagged == [10, 11, 12, 13], done.stdout


def test_a_keyword_the_client_does_not_take_is_refused_before_sending() -> None:
    cf = Client("127.0.0.1:1")
    with pytest.raises(TypeError, match="inject\\(\\) got an unexpected keyword argument 'max_entrys'"):
        cf.inject([], max_entrys=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="search_memories\\(\\) got an unexpected keyword argument 'limit'"):
        cf.search_memories("tea", limit=3)  # type: ignore[call-arg]

    async def asynchronously() -> None:
        async with AsyncClient("127.0.0.1:1") as acf:
            with pytest.raises(TypeError, match="inject\\(\\) got an unexpected keyword argument 'max_entrys'"):
                await acf.inject([], max_entrys=3)  # type: ignore[call-arg]
            with pytest.raises(TypeError, match="search_memories\\(\\) got an unexpected keyword argument 'limit'"):
                await acf.search_memories("tea", limit=3)  # type: ignore[call-arg]

    asyncio.run(asynchronously())


def test_the_plugin_refuses_what_it_sets_itself_and_unknown_options() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'app_state'"):
        ContextInjection(app_state={})
    with pytest.raises(ValueError, match="unknown trigger 'sometimes'"):
        ContextInjection(trigger="sometimes")  # type: ignore[arg-type]
