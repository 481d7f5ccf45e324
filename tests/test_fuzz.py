"""The seeded fuzzer (`tests/fuzz.py`) against a server of its own: thousands of structured requests
over every RPC and thousands of mutated ones, none answered INTERNAL, UNKNOWN or past its deadline."""

from __future__ import annotations

import os
import random

from contextfold import Client

from harness.servers import health_status, serving

from . import fuzz

# CONTEXTFOLD_FUZZ_SEED replays a run; otherwise each run tries a new seed, and prints it.
SEED = int(os.environ.get("CONTEXTFOLD_FUZZ_SEED") or random.randrange(2**32))


def test_no_request_over_any_rpc_gets_internal_unknown_or_a_missed_deadline(tmp_path) -> None:
    print(f"fuzz seed {SEED} (replay: CONTEXTFOLD_FUZZ_SEED={SEED})")
    with serving(tmp_path) as server:
        tally = fuzz.run(server.address, SEED, structured=4000, mutated=4000)
        assert tally.calls == 8000
        assert not tally.failures, f"seed {SEED}: {len(tally.failures)} failures, the first: {tally.failures[0]}"
        # Most requests are refused, but enough get through to reach the code behind the checks.
        assert tally.codes.get("OK", 0) > 200, tally.codes
        assert health_status(server.address) == "SERVING"
        with Client(server.address) as cf:
            # Whatever the fuzzer stored can be read back, a page at a time.
            stores = list(cf.list_stores())
            assert stores and all(len(list(cf.list_memories(store.name))) == store.memory_count for store in stores)
        # What callers cause is not logged with a traceback, and not once per call: once per kind a minute.
        log = server.log()
        assert "Traceback" not in log
        alarms = [line for line in log.splitlines() if '"level": "WARNING"' in line or '"level": "ERROR"' in line]
        assert len(alarms) < 50, f"{len(alarms)} warnings and errors for {tally.calls} calls"
