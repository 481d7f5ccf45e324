"""A stand-in for an OpenTelemetry collector: it receives OTLP/HTTP trace exports and keeps the spans.

The collector is a third-party service; this fake speaks only its trace endpoint
(`POST /v1/traces`, protobuf), decoding each export with the OTLP protos.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from harness.stand_ins.loopback_http import Answer, LoopbackHTTP


@dataclass(frozen=True)
class ExportedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, object]


class FakeCollector:
    def __init__(self) -> None:
        self.spans: list[ExportedSpan] = []
        self._http: LoopbackHTTP | None = None
        self.endpoint = ""

    def _answer(self, path: str, authorization: str | None, data: bytes) -> Answer:
        export = ExportTraceServiceRequest.FromString(data)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ExportedSpan(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.kind,
                            {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes},
                        )
                    )
        return 200, "application/x-protobuf", ExportTraceServiceResponse().SerializeToString()

    def __enter__(self) -> FakeCollector:
        self._http = LoopbackHTTP(self._answer)
        self.endpoint = self._http.origin
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._http is not None
        self._http.close()
