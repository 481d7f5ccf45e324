"""Inject from Python: fold what memory knows into a conversation before the model sees it."""

import contextlib
import json

from contextfold import AlreadyExists, Client, render_for_model

with Client() as cf:  # CONTEXTFOLD_ADDRESS, else localhost:50051
    with contextlib.suppress(AlreadyExists):
        cf.create_store("readme-prefs")
    cf.add_memories(
        "readme-prefs",
        [
            {"id": "ada-theme", "content": "Ada likes the Solarized Dark theme", "user_id": "ada"},
            {"id": "ada-editor", "content": "Ada writes code in Helix", "user_id": "ada"},
        ],
    )

    result = cf.inject(
        [{"role": "user", "content": [{"text": "Which theme should I use in my editor?"}]}],
        stores=["readme-prefs"],
        scope={"user_id": "ada"},
        max_entries=1,
    )
    print(json.dumps(render_for_model(result.messages), indent=2))
    print(f'injected {", ".join(entry.id for entry in result.report.entries)} for "{result.report.query}"')
