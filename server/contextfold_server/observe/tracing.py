"""OpenTelemetry traces, with W3C trace context taken from callers and passed on to providers.

Spans are exported over OTLP/HTTP when an endpoint is configured the standard way
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, with the
other `OTEL_*` settings); without one, tracing costs nothing. Trace context
(`traceparent`, `tracestate`) is read from every call's metadata whether or not
spans are exported, so a provider still joins the caller's trace.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

logger = logging.getLogger(__name__)

tracer = trace.get_tracer("contextfold")
_provider = None


def start_tracing(service_name: str = "contextfold") -> bool:
    """Export spans over OTLP/HTTP when an endpoint is configured; whether it is."""
    global _provider
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    _provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(_provider)
    logger.info("exporting traces over OTLP/HTTP")
    return True


def stop_tracing() -> None:
    """Send the spans still buffered."""
    if _provider is not None:
        _provider.shutdown()


def context_from_metadata(metadata: Sequence[tuple[str, str | bytes]] | None) -> Context:
    """The trace context a caller sent (W3C `traceparent`/`tracestate`), if any."""
    carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
    return propagate.extract(carrier)


def metadata_for_call() -> list[tuple[str, str]]:
    """Metadata carrying the current trace context, for an outgoing call."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


@contextmanager
def span(name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: str | int | float) -> Iterator[Span]:
    with tracer.start_as_current_span(name, kind=kind, attributes=attributes) as current:
        yield current
