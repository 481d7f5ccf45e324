"""One injection: memory and every triggered provider, all at once, failing open.

`inject` asks each source concurrently, each bounded by its own timeout and by
the caller's deadline, so the call takes about as long as its slowest source.
Whatever fails leaves only that source out, with the reason. It returns a
plan of blocks rather than new messages: the caller applies it, so every
message and block that is not the fold target stays exactly as sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from .conversation import Turn
from .entries import RetrievedEntry
from .failures import describe
from .fold import fold_target
from .format import NAMED_FORMATS
from .memory import (
    MEMORY_SOURCE,
    Customizer,
    MemoryOutcome,
    MemoryRequest,
    MemorySearch,
    SkipReason,
    retrieve_memory,
)
from .region import Candidate, PlannedBlock, RenderEntries, TokenCounter, plan_region
from .trigger import Trigger, should_inject

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderSpec:
    """A registered provider, as the engine needs it."""

    name: str
    trigger: Trigger = Trigger.USER_TURN
    priority: int = 0
    order: int = 0
    timeout: float = 1.0
    max_tokens: int = 0
    enabled: bool = True
    trigger_expression: str = ""


# The port to providers: ask one for its text, within `timeout` seconds.
ProvideText = Callable[[ProviderSpec, float], Awaitable[str]]


class _NotTriggered(Exception):
    """A provider's trigger expression returned false."""


@dataclass(frozen=True)
class InjectionRequest:
    memory: MemoryRequest = field(default_factory=MemoryRequest)
    providers: tuple[ProviderSpec, ...] = ()
    # Providers that cannot be asked, each with why: named by the caller but not
    # registered, or the registrations could not be read.
    missing_providers: tuple[tuple[str, str], ...] = ()
    max_tokens: int = 0
    coalesce: bool = False
    # Seconds left before the caller gives up; None when it set no deadline.
    time_left: float | None = None


@dataclass
class SourceOutcome:
    source: str
    priority: int
    injected: bool = False
    skip_reason: SkipReason | None = None
    detail: str = ""
    tokens: int = 0
    duration: float = 0.0


@dataclass
class InjectionOutcome:
    target_index: int = -1
    blocks: list[PlannedBlock] = field(default_factory=list)
    memory: MemoryOutcome = field(default_factory=MemoryOutcome)
    sources: list[SourceOutcome] = field(default_factory=list)
    total_tokens: int = 0
    durations: dict[str, float] = field(default_factory=dict)


# Time kept back from the caller's deadline to build and send the answer, so a
# source that runs out the clock still leaves room for a fail-open reply.
_DEADLINE_RESERVE = 0.02
_DEADLINE_RESERVE_SHARE = 0.1


def _answer_budget(time_left: float | None) -> float | None:
    """Seconds the sources may use: the caller's time less the reserve; None without a deadline."""
    if time_left is None:
        return None
    return max(0.0, time_left - max(_DEADLINE_RESERVE, time_left * _DEADLINE_RESERVE_SHARE))


async def inject(
    turns: Sequence[Turn],
    request: InjectionRequest,
    search: MemorySearch,
    provide: ProvideText,
    count_tokens: TokenCounter,
    customizer: Customizer,
) -> InjectionOutcome:
    """Plan the blocks to fold for one model call. Never raises: a failure leaves its source out."""
    started = time.perf_counter()
    budget = _answer_budget(request.time_left)
    memory_source = SourceOutcome(MEMORY_SOURCE, request.memory.priority)
    providers = [
        (spec, SourceOutcome(spec.name, spec.priority))
        for spec in sorted(request.providers, key=lambda spec: (-spec.priority, spec.order))
    ]
    unknown = [
        SourceOutcome(name, 0, skip_reason=SkipReason.FAILED, detail=detail)
        for name, detail in request.missing_providers
    ]
    outcome = InjectionOutcome(
        target_index=fold_target(turns), sources=[memory_source, *(source for _, source in providers), *unknown]
    )

    try:
        calls = [
            (spec, source, timeout)
            for spec, source in providers
            if (timeout := _provider_timeout(turns, outcome.target_index, spec, source, budget)) is not None
        ]
        memory, *texts = await asyncio.gather(
            _timed(memory_source, started, budget, retrieve_memory(turns, request.memory, search, customizer)),
            *(
                _timed(source, started, timeout, _ask_provider(spec, timeout, provide, customizer))
                for spec, source, timeout in calls
            ),
        )
        outcome.memory = (
            memory if memory is not None else MemoryOutcome().skip(memory_source.skip_reason, memory_source.detail)
        )
        outcome.durations.update(outcome.memory.durations)
        if outcome.memory.skip_reason is not None:
            memory_source.skip_reason, memory_source.detail = outcome.memory.skip_reason, outcome.memory.detail

        folding = time.perf_counter()
        candidates = []
        if outcome.memory.entries:
            candidates.append(
                Candidate(
                    MEMORY_SOURCE,
                    request.memory.priority,
                    -1,
                    entries=tuple(outcome.memory.entries),
                    render_entries=_memory_renderer(request.memory, customizer),
                    max_tokens=request.memory.max_tokens,
                )
            )
        for (spec, source, _), text in zip(calls, texts, strict=True):
            if source.skip_reason is not None:
                continue
            if not text or not text.strip():
                source.skip_reason, source.detail = SkipReason.EMPTY_TEXT, "the provider returned no text"
                continue
            candidates.append(Candidate(spec.name, spec.priority, spec.order, text=text, max_tokens=spec.max_tokens))

        plan = await plan_region(
            turns, candidates, max_tokens=request.max_tokens, coalesce=request.coalesce, count_tokens=count_tokens
        )
        outcome.blocks, outcome.total_tokens = plan.blocks, plan.total_tokens
        kept = {candidate.source: candidate for candidate in plan.kept}
        outcome.memory.entries = list(kept[MEMORY_SOURCE].entries) if MEMORY_SOURCE in kept else []
        for source in outcome.sources:
            if source.source in kept:
                source.injected, source.tokens = True, plan.tokens[source.source]
            elif source.source in plan.dropped:
                source.skip_reason, source.detail = plan.dropped[source.source]
        if MEMORY_SOURCE in plan.dropped:
            outcome.memory.skip_reason, outcome.memory.detail = plan.dropped[MEMORY_SOURCE]
        outcome.durations["fold"] = time.perf_counter() - folding
    except Exception as error:  # noqa: BLE001 - fail open: injection must never stop the model call.
        logger.warning("reason=<%s> | injection failed | returning the messages untouched", error)
        outcome.blocks, outcome.total_tokens = [], 0
        outcome.memory.entries = []
        for source in outcome.sources:
            source.injected, source.tokens = False, 0
            source.skip_reason, source.detail = SkipReason.FAILED, describe(error)
        outcome.memory.skip_reason, outcome.memory.detail = SkipReason.FAILED, describe(error)
    outcome.durations["total"] = time.perf_counter() - started
    return outcome


def _provider_timeout(
    turns: Sequence[Turn], target: int, spec: ProviderSpec, source: SourceOutcome, budget: float | None
) -> float | None:
    """How long to give a provider, or None (with the reason on `source`) when it is not to be asked."""
    if not spec.enabled:
        source.skip_reason, source.detail = SkipReason.DISABLED, "the provider is disabled"
    elif not spec.trigger_expression and not should_inject(spec.trigger, turns):
        source.skip_reason, source.detail = SkipReason.NOT_TRIGGERED, "its trigger did not fire"
    elif target < 0:
        source.skip_reason, source.detail = SkipReason.NO_USER_MESSAGE, "the conversation has no user message"
    elif any(ref.holds(spec.name) for ref in turns[target].injected):
        source.skip_reason, source.detail = SkipReason.ALREADY_INJECTED, f"message {target} already carries its block"
    elif budget is not None and budget <= 0:
        source.skip_reason, source.detail = SkipReason.TIMEOUT, "no time was left before the caller's deadline"
    else:
        return spec.timeout if budget is None else min(spec.timeout, budget)
    return None


async def _ask_provider(spec: ProviderSpec, timeout: float, provide: ProvideText, customizer: Customizer) -> str:
    if spec.trigger_expression and not await customizer.trigger(spec.trigger_expression):
        raise _NotTriggered
    return await provide(spec, timeout)


def _memory_renderer(request: MemoryRequest, customizer: Customizer) -> RenderEntries:
    if request.format_template:
        template = request.format_template

        async def render_template(entries: tuple[RetrievedEntry, ...]) -> str:
            return await customizer.render(template, entries)

        return render_template
    named = NAMED_FORMATS[request.format]

    async def render_named(entries: tuple[RetrievedEntry, ...]) -> str:
        return named(entries)

    return render_named


async def _timed(source: SourceOutcome, started: float, timeout: float | None, work: Awaitable):
    """Run one source's work within `timeout`; on failure, record why on `source` and return None."""
    try:
        async with asyncio.timeout(timeout):
            return await work
    except TimeoutError:
        source.skip_reason = SkipReason.TIMEOUT
        source.detail = f"no answer within {timeout:.3f}s"
    except _NotTriggered:
        source.skip_reason = SkipReason.NOT_TRIGGERED
        source.detail = "its trigger expression returned false"
    except Exception as error:  # noqa: BLE001 - fail open: one source failing leaves only it out.
        source.skip_reason = SkipReason.FAILED
        source.detail = describe(error)
        logger.warning("source=<%s>, reason=<%s> | source failed | leaving it out", source.source, source.detail)
    finally:
        source.duration = time.perf_counter() - started
    return None
