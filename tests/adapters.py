"""What the framework adapters' tests share: the reports an adapter's calls came back with, and the
memory their agents are asked about (Ana's tea and cat, Bob's dog, each under its user)."""

from __future__ import annotations

from dataclasses import dataclass

from contextfold import Client
from contextfold.v1 import injection_pb2


@dataclass
class Reports:
    """Every report an adapter's calls came back with (its `on_report`): one a call to `Inject`."""

    got: list[injection_pb2.InjectionReport]

    def __call__(self, report: injection_pb2.InjectionReport) -> None:
        self.got.append(report)

    def entries(self, index: int) -> list[str]:
        return [entry.id for entry in self.got[index].entries]


def add_pets_and_tea(client: Client, store: str) -> None:
    """Ana's tea (`{store}-tea`) and cat (`{store}-cat`, Miso), Bob's dog (`{store}-dog`, Rex)."""
    client.add_memories(
        store,
        [
            {"id": f"{store}-tea", "content": "Ana drinks green tea every morning", "user_id": "ana"},
            {"id": f"{store}-cat", "content": "Ana's cat is called Miso", "user_id": "ana"},
            {"id": f"{store}-dog", "content": "Bob's dog is called Rex", "user_id": "bob"},
        ],
    )
