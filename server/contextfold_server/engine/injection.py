"""One injection: memory and every triggered provider, all at once, failing open.

`inject` asks each source concurrently, each bounded by its own timeout and by
the caller's deadline, so the call takes about as long as its slowest source.
Each source passes the same gate (`gate.py`), then makes its offer; whatever
fails leaves only that source out, with the reason. It returns a plan of
blocks rather than new messages: the caller applies it, so every message and
block that is not the fold target stays exactly as sent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ..observe.logs import warn_throttled
from .conversation import Turn
from .entries import RetrievedEntry
from .fold import fold_target, shows_text
from .format import NAMED_FORMATS
from .gate import Customizer, Gate, Skipped, SkipReason, admit
from .memory import MEMORY_SOURCE, MemoryRequest, MemorySearch, OffTheLoop, Stages, retrieve_memory
from .outcome import SourceOutcome, describe, describe_privately
from .region import Offer, PlannedBlock, RenderEntries, TokenCounter, plan_region
from .trigger import Trigger

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

    @property
    def gate(self) -> Gate:
        return Gate(self.name, self.trigger, self.trigger_expression, off="" if self.enabled else "it is disabled")


# The port to providers: ask one for its text, within `timeout` seconds.
ProvideText = Callable[[ProviderSpec, float], Awaitable[str]]


@dataclass(frozen=True)
class InjectionRequest:
    memory: MemoryRequest = field(default_factory=MemoryRequest)
    providers: tuple[ProviderSpec, ...] = ()
    # Providers that cannot be asked, each with why: named by the caller but not
    # registered, or the registrations could not be read.
    missing_providers: tuple[tuple[str, str], ...] = ()
    max_tokens: int = 0
    coalesce: bool = False
    # Seconds the sources may take: the caller's time less what answering takes (api/call.py); None
    # when the caller set no deadline.
    budget: float | None = None


@dataclass
class InjectionOutcome:
    target_index: int = -1
    blocks: list[PlannedBlock] = field(default_factory=list)
    # Memory's first, then the providers by priority, then those that could not be asked.
    sources: list[SourceOutcome] = field(default_factory=list)
    total_tokens: int = 0
    # Seconds per stage: trigger, query, embed, search, fold, total.
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def memory(self) -> SourceOutcome:
        return self.sources[0]

    def leave_all_out(self, reason: SkipReason, detail: str) -> None:
        """Fold nothing after all: every source that was to be folded is left out, with why."""
        self.blocks, self.total_tokens = [], 0
        for source in self.sources:
            if source.injected:
                source.skip(reason, detail)


async def inject(
    turns: Sequence[Turn],
    request: InjectionRequest,
    search: MemorySearch,
    provide: ProvideText,
    count_tokens: TokenCounter,
    customizer: Customizer,
    off_the_loop: OffTheLoop = asyncio.to_thread,
) -> InjectionOutcome:
    """Plan the blocks to fold for one model call. Never raises: a failure leaves its source out. Work too
    large for the event loop (a look through many blocks shown before) is done by `off_the_loop`."""
    started = time.perf_counter()
    budget = request.budget
    target = fold_target(turns)
    memory = SourceOutcome(MEMORY_SOURCE, request.memory.priority)
    providers = sorted(request.providers, key=lambda spec: (-spec.priority, spec.order))
    asked = [SourceOutcome(spec.name, spec.priority) for spec in providers]
    outcome = InjectionOutcome(target_index=target, sources=[memory, *asked])
    for name, detail in request.missing_providers:
        missing = SourceOutcome(name, 0)
        missing.skip(SkipReason.FAILED, detail)
        outcome.sources.append(missing)

    async def offer_memory() -> Offer:
        stages = Stages(outcome.durations)
        await admit(request.memory.gate, turns, target, customizer)
        stages.done("trigger")
        entries = await retrieve_memory(turns, request.memory, search, customizer, memory, stages, off_the_loop)
        return Offer(
            MEMORY_SOURCE,
            request.memory.priority,
            -1,
            entries=entries,
            render_entries=_memory_renderer(request.memory, customizer),
            max_tokens=request.memory.max_tokens,
        )

    async def offer_provider(spec: ProviderSpec, timeout: float) -> Offer:
        await admit(spec.gate, turns, target, customizer)
        text = await provide(spec, timeout)
        if not text or not text.strip():
            raise Skipped(SkipReason.EMPTY_TEXT, "the provider returned no text")
        return Offer(spec.name, spec.priority, spec.order, text=text, max_tokens=spec.max_tokens)

    timeouts = [spec.timeout if budget is None else min(spec.timeout, budget) for spec in providers]
    try:
        made = await asyncio.gather(
            _bounded(memory, started, budget, offer_memory),
            *(
                _bounded(source, started, timeout, functools.partial(offer_provider, spec, timeout))
                for spec, source, timeout in zip(providers, asked, timeouts, strict=True)
            ),
        )
        folding = time.perf_counter()
        offers = [offer for offer in made if offer is not None]
        if offers:
            plan = await plan_region(
                offers,
                follows_text=shows_text(turns[target]),
                max_tokens=request.max_tokens,
                coalesce=request.coalesce,
                count_tokens=count_tokens,
            )
            outcome.blocks, outcome.total_tokens = plan.blocks, plan.total_tokens
            kept = {offer.source: offer for offer in plan.kept}
            for source in outcome.sources:
                if source.source in kept:
                    source.fold(plan.tokens[source.source], kept[source.source].entries)
                elif source.source in plan.dropped:
                    dropped = plan.dropped[source.source]
                    source.skip(dropped.reason, dropped.detail)
        outcome.durations["fold"] = time.perf_counter() - folding
    except Exception as error:  # noqa: BLE001 - fail open: injection must never stop the model call.
        warn_throttled(
            logger, type(error).__name__, "reason=<%s> | injection failed | returning the messages untouched", error
        )
        outcome.blocks, outcome.total_tokens = [], 0
        for source in outcome.sources:
            source.skip(SkipReason.FAILED, describe(error))
    outcome.durations["total"] = time.perf_counter() - started
    return outcome


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


async def _bounded(
    source: SourceOutcome, started: float, timeout: float | None, offer: Callable[[], Awaitable[Offer]]
) -> Offer | None:
    """`source`'s offer, made within `timeout`; None, with the reason recorded on `source`, when it has none."""
    try:
        if timeout is not None and timeout <= 0:
            raise Skipped(SkipReason.TIMEOUT, "no time was left before the caller's deadline")
        async with asyncio.timeout(timeout):
            return await offer()
    except Skipped as skipped:
        source.skip(skipped.reason, skipped.detail)
    except TimeoutError:
        source.skip(SkipReason.TIMEOUT, f"no answer within {timeout:.3f}s")
    except Exception as error:  # noqa: BLE001 - fail open: one source failing leaves only it out.
        source.skip(SkipReason.FAILED, describe(error))
        source.private_detail = describe_privately(error)
        warn_throttled(
            logger,
            f"{source.source}:{type(error).__name__}",
            "source=<%s>, reason=<%s> | source failed | leaving it out",
            source.source,
            source.private_detail,
        )
    finally:
        source.duration = time.perf_counter() - started
    return None
