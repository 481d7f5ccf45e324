"""A sandbox descriptor provider: tells the model where its tools run, from the agent's app state.

The agent keeps `{"sandbox": {"image": ..., "workdir": ..., "network": ...}}`
in its app state (a tool may have set it up last turn); this provider renders
it for the model, escaping every value, and says nothing when there is none.

    python examples/providers/sandbox.py 127.0.0.1:50062
    contextfold providers register sandbox --target 127.0.0.1:50062
"""

import logging
import sys

from contextfold.provider import ProvideContext, escape_xml, serve_provider

FIELDS = ("image", "workdir", "network")


def describe_sandbox(context: ProvideContext) -> str | None:
    sandbox = context.app_state.get("sandbox")
    if not isinstance(sandbox, dict):
        return None
    attributes = [f'{field}="{escape_xml(str(sandbox[field]))}"' for field in FIELDS if field in sandbox]
    return f"<sandbox {' '.join(attributes)}/>" if attributes else None


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    serve_provider(describe_sandbox, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50062")
