"""Domain results as response messages: the other half of the servicers' translation (`requests.py`
turns requests into values)."""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.v1 import conversation_pb2, injection_pb2, memory_pb2, provider_pb2

from ..engine.explain import Verdict, settled
from ..engine.gate import SkipReason
from ..engine.injection import InjectionOutcome
from ..engine.ranking import Ranking
from ..engine.region import PlannedBlock
from ..engine.trigger import Trigger
from ..memory.records import MemoryRecord, MemoryVersion, StoreRecord
from ..providers.outcomes import INJECTED
from ..providers.registry import ProviderRecord
from .requests import RANKINGS

_SKIP_REASONS = {reason: injection_pb2.SkipReason.Value(f"SKIP_REASON_{reason.name}") for reason in SkipReason}
_RANKINGS_TO_PROTO = {ranking: value for value, ranking in RANKINGS.items()}
_VERDICTS: dict[Verdict | None, int] = {
    verdict: injection_pb2.CandidateVerdict.Value(f"CANDIDATE_VERDICT_{verdict.name}") for verdict in Verdict
}


# Injection


def injected_block(block: PlannedBlock) -> conversation_pb2.ContentBlock:
    return conversation_pb2.ContentBlock(
        injected=conversation_pb2.InjectedBlock(
            source=block.source, text=block.text, entry_ids=block.entry_ids, sources=block.sources
        )
    )


def _skip_reason(reason: SkipReason | None) -> int:
    return _SKIP_REASONS[reason] if reason else injection_pb2.SKIP_REASON_UNSPECIFIED


def report_to_proto(outcome: InjectionOutcome, reveal: bool = False) -> injection_pb2.InjectionReport:
    """The report; its top-level fields are memory's outcome, read here and nowhere else. With
    `reveal` (an admin asks), a source's detail is the fuller story where there is one."""
    memory = outcome.memory
    report = injection_pb2.InjectionReport(
        injected=memory.injected,
        skip_reason=_skip_reason(memory.skip_reason),
        detail=memory.detail,
        query=memory.query,
        target_message_index=outcome.target_index if outcome.blocks else -1,
        entries=[injection_pb2.InjectedEntry(id=e.id, store=e.store, score=e.score) for e in memory.entries],
        total_tokens=outcome.total_tokens,
        ranking=ranking_to_proto(memory.ranking),
    )
    for stage, seconds in outcome.durations.items():
        report.stage_durations[stage].FromNanoseconds(int(seconds * 1e9))
    for source in outcome.sources:
        entry = report.sources.add(
            source=source.source,
            injected=source.injected,
            skip_reason=_skip_reason(source.skip_reason),
            detail=source.private_detail if reveal and source.private_detail else source.detail,
            priority=source.priority,
            tokens=source.tokens,
        )
        entry.duration.FromNanoseconds(int(source.duration * 1e9))
    if memory.considered:
        ids = [entry.id for entry in memory.entries]
        for candidate in settled(memory.considered, memory.injected, ids, memory.skip_reason, memory.detail):
            report.candidates.add(
                id=candidate.id,
                store=candidate.store,
                content=candidate.content,
                score=candidate.score,
                similarity=candidate.similarity,
                signals=candidate.signals,
                inputs=candidate.inputs,
                verdict=_VERDICTS.get(candidate.verdict, injection_pb2.CANDIDATE_VERDICT_UNSPECIFIED),
                detail=candidate.detail,
                rank=candidate.rank,
            )
    return report


def ranking_to_proto(ranking: Ranking | None) -> memory_pb2.Ranking.ValueType:
    return memory_pb2.RANKING_UNSPECIFIED if ranking is None else _RANKINGS_TO_PROTO[ranking]


# Memory


def store_to_proto(record: StoreRecord) -> memory_pb2.Store:
    store = memory_pb2.Store(
        name=record.name,
        description=record.description,
        dimension=record.dimension,
        memory_count=record.memory_count,
    )
    store.create_time.FromDatetime(record.create_time)
    if record.default_ttl is not None:
        store.default_ttl.FromTimedelta(record.default_ttl)
    return store


def memory_to_proto(record: MemoryRecord, vector: Sequence[float] = ()) -> memory_pb2.Memory:
    """The entry as responses show it; `vector` only where it is output (ExportMemories)."""
    memory = memory_pb2.Memory(
        id=record.id,
        store=record.store,
        content=record.content,
        user_id=record.scope.user_id,
        agent_id=record.scope.agent_id,
        session_id=record.scope.session_id,
        etag=record.etag,
        vector=vector,
    )
    memory.metadata.update(record.metadata)
    memory.create_time.FromDatetime(record.create_time)
    memory.update_time.FromDatetime(record.update_time or record.create_time)
    if record.expire_time is not None:
        memory.expire_time.FromDatetime(record.expire_time)
    return memory


def version_to_proto(version: MemoryVersion) -> memory_pb2.MemoryVersion:
    """A version an update replaced: the entry as it was (no etag: a version is not updated), and when
    and by whom it was replaced."""
    message = memory_pb2.MemoryVersion(
        version=version.version, memory=memory_to_proto(version.memory), replaced_by=version.replaced_by
    )
    message.memory.ClearField("etag")
    message.replace_time.FromDatetime(version.replace_time)
    return message


# Providers


def trigger_to_proto(trigger: Trigger) -> int:
    return injection_pb2.TRIGGER_EVERY_TURN if trigger is Trigger.EVERY_TURN else injection_pb2.TRIGGER_USER_TURN


def provider_to_proto(record: ProviderRecord) -> provider_pb2.Provider:
    provider = provider_pb2.Provider(
        name=record.name,
        target=record.target,
        trigger=trigger_to_proto(record.trigger),
        trigger_expression=record.trigger_expression,
        priority=record.priority,
        max_tokens=record.max_tokens,
        enabled=record.enabled,
    )
    if record.tls:
        # Never the client key.
        provider.tls.MergeFrom(
            provider_pb2.ProviderTls(
                ca_pem=record.tls_ca, client_cert_pem=record.tls_cert, server_name=record.tls_server_name
            )
        )
        provider.tls.SetInParent()
    if record.credential_header:
        # The header's name, never its value.
        provider.credential.header = record.credential_header
    provider.timeout.FromMilliseconds(record.timeout_ms)
    provider.create_time.FromDatetime(record.create_time)
    provider.update_time.FromDatetime(record.update_time)
    for counted in record.outcomes:
        injected = counted.outcome == INJECTED
        outcome = provider.outcomes.add(
            injected=injected,
            skip_reason=injection_pb2.SKIP_REASON_UNSPECIFIED if injected else _skip_reason_named(counted.outcome),
            count=counted.count,
            last_detail=counted.last_detail,
        )
        outcome.last_time.FromDatetime(counted.last_time)
    return provider


def _skip_reason_named(name: str) -> int:
    """A skip reason as the outcomes' table names it (`SkipReason`'s value, `timeout`); a name this server
    does not know as FAILED."""
    try:
        return _skip_reason(SkipReason(name))
    except ValueError:
        return injection_pb2.SKIP_REASON_FAILED
