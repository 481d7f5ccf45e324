"""Keeping memory right: correct, filter, expire, erase, move and remember, against `make run`."""

import time
from datetime import UTC, datetime, timedelta

from contextfold import Aborted, Client

with Client() as cf:
    cf.create_store("profile", default_ttl=timedelta(days=365))  # entries expire a year after they are added
    cf.create_store("notes")
    try:
        # Correct a memory. An update with the etag of the version read lands on that version only.
        (home,) = cf.add_memories("profile", [{"id": "ada-home", "content": "Ada lives in Denver", "user_id": "ada"}])
        moved = cf.update_memory("ada-home", content="Ada moved to Lisbon", etag=home.etag).memory
        try:
            cf.update_memory("ada-home", content="Ada lives in Oslo", etag=home.etag)  # a stale read
        except Aborted as error:
            print("stale etag:", error.reason)
        (before,) = cf.list_memory_versions("ada-home")
        print(f"version {before.version} was: {before.memory.content}")
        undone = cf.update_memory("ada-home", content=before.memory.content, etag=moved.etag).memory
        print("undone:", undone.content)
        upsert = cf.update_memory(
            "ada-tea", content="Ada likes green tea", store="profile", user_id="ada", allow_missing=True
        )
        print("upsert created it:", upsert.created)

        # Filter by metadata and time.
        cf.add_memories(
            "notes",
            [
                {"content": "Standup moved to 10am", "metadata": {"team": "core", "priority": 2, "tags": ["meetings"]}},
                {"content": "Design review on Friday", "metadata": {"team": "design", "priority": 5}},
                {"content": "The core team owns billing", "metadata": {"team": "core", "priority": 4}},
            ],
        )
        recent = {"create_time": {"gte": datetime.now(UTC) - timedelta(days=7)}}
        found = cf.search_memories("when do we meet?", stores=["notes"], filter={"team": "core", **recent})
        print("core, this week:", [result.memory.content for result in found])
        urgent = {"any": [{"priority": {"gte": 5}}, {"tags": {"contains": "meetings"}}]}
        print("urgent or meetings:", sorted(m.content for m in cf.list_memories("notes", filter=urgent)))
        asked = [{"role": "user", "content": [{"text": "Who owns billing?"}]}]
        result = cf.inject(asked, stores=["notes"], filter={"not": {"team": "design"}}, max_entries=1)
        print("injected:", [cf.get_memory(entry.id).content for entry in result.report.entries])

        # Expire: gone from every call the moment it expires.
        soon = datetime.now(UTC) + timedelta(seconds=1)
        (code,) = cf.add_memories("profile", [{"content": "Door code 4321", "expire_time": soon}])
        print("door code found:", code.id in [r.memory.id for r in cf.search_memories("door code", stores=["profile"])])
        time.sleep(1.2)
        print("door code found:", code.id in [r.memory.id for r in cf.search_memories("door code", stores=["profile"])])
        print("kept a year:", home.expire_time.ToDatetime().year - home.create_time.ToDatetime().year)

        # Move: an export imported again changes nothing (into another server, it copies).
        totals = cf.import_memories(cf.export_memories(stores=["notes"]))
        counts = (totals.added_count, totals.replaced_count, totals.unchanged_count)
        print("import again: {} added, {} replaced, {} unchanged".format(*counts))

        # Remember a conversation: the user's turns, once each, never injected context.
        conversation = [
            {"role": "user", "content": [{"text": "I am planning a trip to Japan in April."}]},
            {"role": "assistant", "content": [{"text": "Cherry blossoms peak then!"}]},
        ]
        done = cf.remember("profile", conversation, scope={"user_id": "ada"})
        print("remembered:", [m.memory.content for m in done.memories])
        print("again, skipped:", cf.remember("profile", conversation, scope={"user_id": "ada"}).skipped_turn_count)

        # Erase a user: in every store named (none named: every store), with each entry's versions.
        print("erased:", cf.erase_memories(scope={"user_id": "ada"}, stores=["profile", "notes"]))
    finally:
        for store in ("profile", "notes"):
            cf.delete_store(store, force=True)
