"""Every customization from the reference's examples, over the wire: run it against a server (make run)."""

import contextlib

from contextfold import AlreadyExists, Client

cf = Client()  # $CONTEXTFOLD_ADDRESS, or localhost:50051
with contextlib.suppress(AlreadyExists):
    cf.create_store("editor")
cf.add_memories(  # ids make the add idempotent: run this file as often as you like
    "editor",
    [
        {"id": "theme", "content": "User prefers dark themes"},
        {"id": "keys", "content": "User edits with vim keybindings"},
        {"id": "markup", "content": "User's notes use <b>bold</b> & <i>italics</i>"},
    ],
)


def show(label, messages, **options):
    result = cf.inject(messages, stores=["editor"], max_entries=2, **options)
    if result.injected:
        print(f"{label}: {result.messages[-1]['content'][-1]['injected']['text']!r}")
    else:
        print(f"{label}: skipped ({result.report.detail})")


ask = [{"role": "user", "content": [{"text": "Set up my editor"}]}]
long = [
    {"role": "user", "content": [{"text": "Hi"}]},
    {"role": "assistant", "content": [{"text": "Hello! What are we doing?"}]},
    {"role": "user", "content": [{"text": "Editor time"}]},
    {"role": "assistant", "content": [{"text": "Which editor theme do you like?"}]},
    {"role": "user", "content": [{"text": "Do you remember my editor settings?"}]},
]

# Triggers
show("trigger, 4+ messages, short", ask, trigger_expression="messages.size() >= 4")
show("trigger, 4+ messages, long", long, trigger_expression="messages.size() >= 4")
flag = "has(app_state.recallEnabled) && app_state.recallEnabled"
show("trigger, app_state flag", ask, trigger_expression=flag, app_state={"recallEnabled": True})
show("trigger, every turn", ask, trigger="every_turn")

# Queries
recall = "latest_user_text.matches('(?i)\\\\b(remember|recall|last time|previously)\\\\b') ? latest_user_text : ''"
show("query, only on recall", ask, query_expression=recall)
show("query, on recall", long, query_expression=recall)
both = "[latest_assistant_text, latest_user_text].filter(t, t != '').join('\\n')"
show("query, assistant + user", long, query_expression=both)

# Formats
show("format, bullets", ask, format="bullets")
preamble = (
    "Here's what you know about this user from past conversations:\n"
    "{% for e in entries %}- {{ e.content }}{% if not loop.last %}\n{% endif %}{% endfor %}"
)
show("format, preamble", ask, format_template=preamble)
by_store = "{% for e in entries %}[{{ e.store }}] {{ e.content }}{% if not loop.last %}\n{% endif %}{% endfor %}"
show("format, by store", ask, format_template=by_store)
scored = (
    "{% for e in entries %}- {{ e.content }} ({{ '%.2f' | format(e.score) }})"
    "{% if not loop.last %}\n{% endif %}{% endfor %}"
)
show("format, with score", ask, format_template=scored)
xml = "<context>{% for e in entries %}<item>{{ e.content | escape_xml }}</item>{% endfor %}</context>"
show("format, custom XML", [{"role": "user", "content": [{"text": "How do I format notes?"}]}], format_template=xml)
