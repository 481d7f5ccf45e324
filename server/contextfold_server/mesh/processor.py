"""contextfold as Envoy's external processor (`envoy.service.ext_proc.v3.ExternalProcessor`): memory
folded into the model requests that pass through a mesh, with no change to the agents that send them.

Envoy opens one stream per HTTP request. The processor asks for the request's headers and its
buffered body, and nothing of the answer (a streamed answer passes untouched), unless the operator
turns on the outcome header. For a route it recognises (`shapes.shape_of`), it reads the body in
that API's own format, asks contextfold's own `Inject` with the key and settings the request
carries (`settings.py`), and answers with the body changed in the folded message only.

It is a client of the API like any other: each `Inject` goes through the server's own socket
(`api_address`), so the key's tenant, scope binding, quotas, call slots and deadlines all hold,
and the processor can reach nothing the key could not. It never fails the request: whatever goes
wrong (no key, an unknown route, a body that is not the API's JSON or is over the limit,
contextfold's own error or its time running out), the request continues unchanged, and the
reason goes to the log, the metrics and, when asked for, a response header. Its answer comes
within `timeout` of the body's arrival, below Envoy's `message_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc, memory_pb2, memory_pb2_grpc
from prometheus_client import Counter

from ..access.keys import bearer_key
from ..api.requests import remember_fault, turns_from_messages
from ..engine.remember import injected_texts
from ..errors import InvalidArgument
from ..turns import InTurns
from . import ext_proc_pb2 as ext_proc
from .settings import PREFIX, BadSetting, MeshSettings, ours, settings
from .shapes import Located, NotThisShape, Shape, apply, shape_of, shown_earlier
from .spans import NotJson

logger = logging.getLogger(__name__)

OUTCOME_HEADER = f"{PREFIX}outcome"
# What the metrics count a request as: folded, or why it went on unchanged.
OUTCOMES = ("folded", "not_a_route", "bad_setting", "bad_body", "not_injected", "refused", "timeout", "error")
_SKIP_MODE = ext_proc.ProcessingMode(
    request_body_mode=ext_proc.ProcessingMode.NONE,
    response_header_mode=ext_proc.ProcessingMode.SKIP,
)
_REQUEST_ID_CHARACTERS = frozenset(chr(c) for c in range(0x21, 0x7F))


@dataclass(frozen=True)
class MeshLimits:
    """How long the processor takes for a body (its own deadline, below Envoy's `message_timeout`),
    the largest body it reads, and whether every answer says what was done (`OUTCOME_HEADER`)."""

    timeout: float = 0.15
    max_body_bytes: int = 4 * 1024 * 1024
    outcome_header: bool = False


@dataclass
class _Exchange:
    """One HTTP request's way through the processor."""

    stream: dict[str, str]
    shape: Shape | None = None
    settings: MeshSettings = field(default_factory=MeshSettings)
    headers: dict[str, str] = field(default_factory=dict)
    request_id: str = ""
    outcome: str = "not_a_route"
    reason: str = "no request seen"
    said: bool = False

    def unchanged(self, outcome: str, reason: str) -> None:
        self.outcome, self.reason = outcome, reason

    @property
    def caller(self) -> str:
        """Whose turn this request's work off the event loop takes (`turns.InTurns`): its key's (the tenant is
        known only once contextfold has checked the key), apart from any namespace's name."""
        return f"mesh key {self.settings.api_key}"

    def metadata(self) -> list[tuple[str, str]]:
        """What a call the processor makes for this request carries: its request id, and its key."""
        key = self.settings.api_key
        return [("x-request-id", self.request_id)] + ([("authorization", f"Bearer {key}")] if key else [])


# Envoy's name for the service, under which the processor is served.
SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


class ExternalProcessor:
    def __init__(self, api: Callable[[], grpc.aio.Channel], limits: MeshLimits, counted: Counter) -> None:
        self._api = api
        self._limits = limits
        self._counted = counted
        self._remembering: set[asyncio.Task[None]] = set()

    def handler(self) -> grpc.GenericRpcHandler:
        """The service, for a server to add (`add_generic_rpc_handlers`)."""
        process = grpc.stream_stream_rpc_method_handler(
            self.process,
            request_deserializer=ext_proc.ProcessingRequest.FromString,
            response_serializer=ext_proc.ProcessingResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Process": process})

    async def process(
        self, requests: AsyncIterator[ext_proc.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        stream = {key.lower(): value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        exchange = _Exchange(stream)
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "request_headers":
                    answer = self._request_headers(exchange, request.request_headers)
                    if exchange.shape is None:
                        self._said(exchange)
                    yield answer
                elif kind == "request_body":
                    try:
                        answer = await self._request_body(exchange, request.request_body)
                    except Exception:
                        # A bug: logged with its trace; the request goes on as sent.
                        logger.exception("request_id=<%s> | unexpected error in the processor", exchange.request_id)
                        exchange.unchanged("error", "the processor failed; its log has the details")
                        answer = ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse())
                    self._said(exchange)
                    yield answer
                elif kind == "response_headers":
                    yield self._response_headers(exchange)
                elif kind == "response_body":
                    yield ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse())
                elif kind == "request_trailers":
                    yield ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())
                elif kind == "response_trailers":
                    yield ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse())
        finally:
            self._said(exchange)

    def _request_headers(self, exchange: _Exchange, given: ext_proc.HttpHeaders) -> ext_proc.ProcessingResponse:
        """Our headers removed, whatever else happens; the route's shape and the settings read."""
        headers = [(h.key.lower(), _value(h)) for h in given.headers.headers]
        exchange.headers = {name: value for name, value in headers if not name.startswith(PREFIX)}
        ours_sent = sorted({name for name, _ in headers if name.startswith(PREFIX)})
        mutation = ext_proc.HeaderMutation(remove_headers=ours_sent)
        request_id = exchange.headers.get("x-request-id", "")
        usable = 0 < len(request_id) <= 128 and set(request_id) <= _REQUEST_ID_CHARACTERS
        exchange.request_id = request_id if usable else uuid.uuid4().hex
        common = ext_proc.CommonResponse(header_mutation=mutation)
        answer = ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse(response=common))
        method, path = exchange.headers.get(":method", ""), exchange.headers.get(":path", "")
        exchange.shape = shape_of(method, path)
        try:
            configured = ours(exchange.stream.items())
            # The operator's key (the stream's `authorization`) is the stream's setting, and so wins.
            operators = bearer_key(exchange.stream.get("authorization", ""))
            if operators:
                configured["api-key"] = operators
            exchange.settings = settings(configured, ours(headers))
        except BadSetting as error:
            exchange.shape = None
            exchange.unchanged("bad_setting", str(error))
        else:
            if exchange.shape is None:
                route = f"{method} {path.split('?', 1)[0]}"
                exchange.unchanged("not_a_route", f"{route} is not a model API route contextfold reads")
            elif given.end_of_stream:
                exchange.shape = None
                exchange.unchanged("bad_body", "the request has no body")
        if exchange.shape is None and not self._outcome_header(exchange):
            # Nothing to read: Envoy need not send the body (with `allow_mode_override`; else it is passed on).
            answer.mode_override.CopyFrom(_SKIP_MODE)
        return answer

    async def _request_body(self, exchange: _Exchange, given: ext_proc.HttpBody) -> ext_proc.ProcessingResponse:
        unchanged = ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse())
        if exchange.shape is None:
            return unchanged
        started = asyncio.get_running_loop().time()
        body = given.body
        if len(body) > self._limits.max_body_bytes:
            limit = self._limits.max_body_bytes
            exchange.unchanged("bad_body", f"the body's {len(body)} bytes pass the limit of {limit}")
            return unchanged
        kind = exchange.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            exchange.unchanged("bad_body", f"the body is {kind}, not application/json")
            return unchanged
        try:
            text = body.decode("utf-8")
            located = await _read(exchange.shape, text, exchange.caller)
        except UnicodeDecodeError:
            exchange.unchanged("bad_body", "the body is not UTF-8")
            return unchanged
        except (NotJson, NotThisShape) as error:
            exchange.unchanged("bad_body", f"not a {exchange.shape.name} request: {error}")
            return unchanged
        folded = await self._fold(exchange, text, located, started + self._limits.timeout)
        if exchange.settings.remember:
            self._remember(exchange, located)
        if folded is None:
            return unchanged
        mutation = ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(body=folded))
        if "content-length" in exchange.headers:
            # Envoy leaves a buffered body's length to the processor that changes it.
            mutation.header_mutation.set_headers.append(
                ext_proc.HeaderValueOption(
                    header=ext_proc.HeaderValue(key="content-length", raw_value=str(len(folded)).encode()),
                    append_action=ext_proc.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
                )
            )
        return ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse(response=mutation))

    async def _fold(self, exchange: _Exchange, text: str, located: list[Located], deadline: float) -> bytes | None:
        """The body with memory folded in, or None (and the reason on `exchange`)."""
        request = exchange.settings.inject_request(entry.message for entry in located)
        if request.memory.format not in (injection_pb2.FORMAT_UNSPECIFIED, injection_pb2.FORMAT_XML):
            shown_earlier(list(request.messages))
        timeout = deadline - asyncio.get_running_loop().time()
        if timeout <= 0:
            exchange.unchanged("timeout", "no time was left to ask contextfold")
            return None
        try:
            answer = await injection_pb2_grpc.InjectionServiceStub(self._api()).Inject(
                request, timeout=timeout, metadata=exchange.metadata()
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                exchange.unchanged("timeout", f"contextfold did not answer within {self._limits.timeout * 1000:g} ms")
            else:
                exchange.unchanged("refused", f"{error.code().name}: {error.details()}")
            return None
        report = answer.report
        texts = _blocks(answer, request, report)
        if not texts:
            reason = injection_pb2.SkipReason.Name(report.skip_reason).removeprefix("SKIP_REASON_").lower()
            exchange.unchanged("not_injected", f"{reason}: {report.detail}" if report.detail else reason)
            return None
        target = report.target_message_index
        try:
            edited = apply(text, located[target].append(texts))
        except NotThisShape as error:
            exchange.unchanged("bad_body", str(error))
            return None
        exchange.outcome = "folded"
        exchange.reason = f"folded {len(texts)} blocks ({len(report.entries)} memory entries) into message {target}"
        return edited.encode("utf-8")

    def _remember(self, exchange: _Exchange, located: list[Located]) -> None:
        """The request's user turns remembered (`Remember`), once the request has gone on: which of them can be
        remembered (`_rememberable`, a pass over all their text) is read then too, off the event loop."""
        users = [entry.message for entry in located if entry.message.role == conversation_pb2.ROLE_USER]

        async def remember() -> None:
            try:
                messages = await InTurns(exchange.caller)(_rememberable, users)
            except InvalidArgument as error:
                logger.warning(
                    "request_id=<%s> reason=<%s> | the request's turns were not remembered", exchange.request_id, error
                )
                return
            if len(messages) < len(users):
                logger.info(
                    "request_id=<%s> left_out=<%d> | user turns no entry can hold were not remembered",
                    exchange.request_id, len(users) - len(messages),
                )  # fmt: skip
            if not messages:
                return
            request = memory_pb2.RememberRequest(
                store=exchange.settings.remember,
                messages=messages,
                scope=exchange.settings.scope,
                roles=[conversation_pb2.ROLE_USER],
            )
            try:
                await memory_pb2_grpc.MemoryServiceStub(self._api()).Remember(
                    request, timeout=30, metadata=exchange.metadata()
                )
            except grpc.aio.AioRpcError as error:
                logger.warning(
                    "request_id=<%s> code=<%s> reason=<%s> | the request's turns were not remembered",
                    exchange.request_id, error.code().name, error.details(),
                )  # fmt: skip

        task = asyncio.create_task(remember())
        self._remembering.add(task)
        task.add_done_callback(self._remembering.discard)

    def _response_headers(self, exchange: _Exchange) -> ext_proc.ProcessingResponse:
        mutation = ext_proc.HeaderMutation()
        if self._outcome_header(exchange):
            said = f"{exchange.outcome}: {exchange.reason}".encode("ascii", "replace")[:256]
            header = ext_proc.HeaderValue(key=OUTCOME_HEADER, raw_value=said.replace(b"\n", b" "))
            mutation.set_headers.append(ext_proc.HeaderValueOption(header=header))
        return ext_proc.ProcessingResponse(
            response_headers=ext_proc.HeadersResponse(response=ext_proc.CommonResponse(header_mutation=mutation))
        )

    def _outcome_header(self, exchange: _Exchange) -> bool:
        return self._limits.outcome_header or exchange.settings.outcome_header

    def _said(self, exchange: _Exchange) -> None:
        """The request's one log line and its count, once its stream ends."""
        if exchange.said:
            return
        exchange.said = True
        shape = exchange.shape.name if exchange.shape else "none"
        self._counted.labels(shape, exchange.outcome).inc()
        logger.info(
            "request_id=<%s> shape=<%s> outcome=<%s> reason=<%s> | %s",
            exchange.request_id, shape, exchange.outcome, exchange.reason,
            "memory folded" if exchange.outcome == "folded" else "the request went on unchanged",
        )  # fmt: skip


def _blocks(
    answer: injection_pb2.InjectResponse, request: injection_pb2.InjectRequest, report: injection_pb2.InjectionReport
) -> list[str]:
    """The text of each block folded into the target message: those after the blocks it was sent with."""
    target = report.target_message_index
    if target < 0 or target >= len(answer.messages):
        return []
    sent = len(request.messages[target].content)
    return [block.injected.text for block in answer.messages[target].content[sent:] if block.HasField("injected")]


def _value(header: ext_proc.HeaderValue) -> str:
    """A header's value: Envoy sends it as bytes (`raw_value`), older versions as text."""
    return header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value


async def _read(shape: Shape, text: str, caller: str) -> list[Located]:
    """The body read in its shape: off the event loop when it is large (a large request's parse takes
    milliseconds), on the worker's thread in `caller`'s turn."""
    if len(text) < 64 * 1024:
        return shape.read(text)
    return await InTurns(caller)(shape.read, text)


def _rememberable(users: list[conversation_pb2.Message]) -> list[conversation_pb2.Message]:
    """The user turns Remember would take: one it would refuse (a control character, more text than an entry
    holds: `api.requests.remember_fault`) is left out, so the conversation's other turns are remembered, now
    and on each later request that repeats it. InvalidArgument when the turns as a whole are more than
    Remember takes."""
    turns = turns_from_messages(users)
    injected = injected_texts(turns)
    kept = zip(users, turns, strict=True)
    return [message for message, turn in kept if not remember_fault(message, turn, injected, False)]
