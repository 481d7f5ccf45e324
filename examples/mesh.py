"""Memory for a model call that goes through Envoy, with no change to the agent (`make mesh-demo`).

Starts, on loopback: contextfold with its external processor on (an embedded Postgres in a scratch
folder, the local model, open: no API keys), a stand-in for the OpenAI API that records what it
receives (no key or network needed), and Envoy between them, configured as deploy/envoy/envoy.yaml
is. Then an unmodified OpenAI client asks through Envoy, and the demo prints what the "model" got.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from contextfold import Client  # noqa: E402

from harness.envoy import Envoy, EnvoySetup  # noqa: E402
from harness.servers import start_server  # noqa: E402
from harness.stand_ins.model_apis import ModelAPIs  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="contextfold-mesh-demo-") as scratch:
        print("starting contextfold (--ext-proc on), a stand-in OpenAI API, and Envoy ...")
        server = start_server(Path(scratch) / "server.log", "--ext-proc", "on", "--data-dir", f"{scratch}/pgdata")
        model = ModelAPIs()
        envoy = None
        try:
            with Client(server.address) as cf:
                cf.create_store("prefs", description="what the user likes")
                cf.add_memories("prefs", [{"content": "Ada's favourite colour is teal.", "user_id": "ada"}])
            envoy = Envoy(EnvoySetup(model.port, int(server.address.rsplit(":", 1)[1])))

            agent = openai.OpenAI(base_url=f"{envoy.origin}/v1", api_key="sk-your-real-key")
            answer = agent.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "What colour should my new bike be?"}],
                extra_headers={"x-contextfold-user-id": "ada"},
            )
            received = model.last()
            print(f"\nthe agent sent to {envoy.origin}/v1/chat/completions:")
            print('  messages: [{"role": "user", "content": "What colour should my new bike be?"}]')
            print("\nthe model API received:")
            print("  messages: " + json.dumps(received.json()["messages"], indent=2).replace("\n", "\n  "))
            print(f"  authorization: {received.headers['authorization']} (the agent's own, untouched)")
            print(f"\nthe answer: {answer.choices[0].message.content}")
        finally:
            if envoy is not None:
                envoy.stop()
            model.close()
            server.stop()


if __name__ == "__main__":
    main()
