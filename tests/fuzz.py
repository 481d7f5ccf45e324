"""A seeded fuzzer over every contextfold RPC: structured requests, then mutated bytes.

Structured requests are made from each request type's descriptor, so every field
of every RPC is reached, the ones added later too: half start from a valid
request and change a few fields, so they get past the first check to the code
behind it; half fill every field at random. Values come from the places where
input goes wrong: empty, huge, NUL and control characters, lone high code points,
non-finite floats, extreme integers, unknown enum numbers, deep nesting. Then valid
requests, serialized, have bytes flipped, inserted and cut, and go out raw.

What must hold: no call ends INTERNAL or UNKNOWN (a refusal names the field, and
injection fails open), none runs past its deadline, and the server still serves.
Run it alone as `python -m tests.fuzz ADDRESS [--seed N]`; a failure names its
seed, its index and the request, so it replays.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from contextfold.v1 import conversation_pb2, injection_pb2, memory_pb2, provider_pb2
from google.protobuf import descriptor, message_factory, struct_pb2
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2

SERVICES = {
    "contextfold.v1.InjectionService": injection_pb2.DESCRIPTOR.services_by_name["InjectionService"],
    "contextfold.v1.MemoryService": memory_pb2.DESCRIPTOR.services_by_name["MemoryService"],
    "contextfold.v1.ProviderService": provider_pb2.DESCRIPTOR.services_by_name["ProviderService"],
    # What every deployment's probes call: its unary method.
    "grpc.health.v1.Health": health_pb2.DESCRIPTOR.services_by_name["Health"],
}
# Codes that mean the server failed, not the request: never an answer to bad input.
FAILURES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
DEADLINE = 20.0
WATCH = "/grpc.health.v1.Health/Watch"
STORE, SMALL_STORE, PROVIDER = "fuzz-store", "fuzz-small", "fuzz-provider"

_STRINGS = [
    "",
    " ",
    "a",
    STORE,
    SMALL_STORE,
    PROVIDER,
    "memory",
    "nul\x00byte",
    "\x00",
    "bell\x07",
    "line\nbreak",
    "tab\there",
    "\x7f",
    "\u202e\u200b",
    "\U0010ffff",
    "é" * 200,
    "{{ 7 * 7 }}",
    "{% for x in range(100000000) %}{% endfor %}",
    "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
    "{%- for a in x %}" * 40,
    "size(messages) > 0",
    "app_state.missing.deeper",
    "'x' * 100",
    "127.0.0.1:1",
    "unix:/tmp/contextfold-fuzz.sock",
    "dns:///localhost:1",
    "[::1]:1",
    "localhost:99999",
    "eyJhZnRlciI6IDF9",
    "eyJhZnRlciI6MSwia2V5IjoiMCJ9.AAAA",
    "x" * 70,
    "y" * 5000,
]
_INTS = [0, 1, -1, 2, 5, 100, 101, 1000, 1001, 2000, 2001, 30000, 2**31 - 1, -(2**31)]
_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-45, 3.4e38, -3.4e38, math.nan, math.inf, -math.inf]


@dataclass
class Failure:
    seed: int
    index: int
    method: str
    code: str
    details: str
    request: str


@dataclass
class Tally:
    calls: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def string(self) -> str:
        roll = self.rng.random()
        if roll < 0.7:
            return self.rng.choice(_STRINGS)
        if roll < 0.85:
            return "".join(chr(self.rng.randrange(0, 0x250)) for _ in range(self.rng.randrange(1, 40)))
        return self.rng.choice("abcxyz") * self.rng.choice([64, 129, 1025, 16_385, 70_000])

    def number(self, kind: int) -> Any:
        if kind in (descriptor.FieldDescriptor.TYPE_FLOAT, descriptor.FieldDescriptor.TYPE_DOUBLE):
            return self.rng.choice(_FLOATS) if self.rng.random() < 0.7 else self.rng.uniform(-2, 2)
        value = self.rng.choice(_INTS) if self.rng.random() < 0.8 else self.rng.randrange(-(2**31), 2**31)
        if kind in (descriptor.FieldDescriptor.TYPE_UINT32, descriptor.FieldDescriptor.TYPE_FIXED32):
            return abs(value) % 2**32
        if kind in (descriptor.FieldDescriptor.TYPE_INT64, descriptor.FieldDescriptor.TYPE_SINT64):
            return value * self.rng.choice([1, 2**32])
        return value

    def struct_value(self, value: struct_pb2.Value, depth: int) -> None:
        roll = self.rng.random()
        if depth > 0 and roll < 0.3:
            self.struct(value.struct_value, depth - 1)
        elif depth > 0 and roll < 0.45:
            for _ in range(self.rng.randrange(0, 4)):
                self.struct_value(value.list_value.values.add(), depth - 1)
        elif roll < 0.7:
            value.number_value = self.rng.choice(_FLOATS)
        elif roll < 0.9:
            value.string_value = self.string()
        elif roll < 0.95:
            value.bool_value = self.rng.random() < 0.5
        else:
            value.null_value = struct_pb2.NULL_VALUE

    def struct(self, struct: struct_pb2.Struct, depth: int) -> None:
        for _ in range(self.rng.randrange(0, 4)):
            self.struct_value(struct.fields[self.string()[:40]], depth)

    def deep_struct(self, struct: struct_pb2.Struct) -> None:
        """Objects within objects, past any sane depth (and past what a decoder may take)."""
        levels = self.rng.choice([17, 33, 60, 120])
        current = struct
        for _ in range(levels):
            current = current.fields["a"].struct_value

    def fill(self, message: Message, depth: int = 3, every_field: bool = True) -> None:
        """Random values in `message`'s fields (each, or a few), nested messages `depth` deep."""
        if isinstance(message, struct_pb2.Struct):
            if self.rng.random() < 0.1:
                self.deep_struct(message)
            else:
                self.struct(message, 3)
            return
        fields = list(message.DESCRIPTOR.fields)
        chosen = fields if every_field else self.rng.sample(fields, min(len(fields), self.rng.randrange(1, 4)))
        oneofs_set: set[str] = set()
        for field_descriptor in chosen:
            oneof = field_descriptor.containing_oneof
            if oneof is not None and not every_field and oneof.name in oneofs_set:
                continue
            if oneof is not None:
                oneofs_set.add(oneof.name)
            if self.rng.random() < (0.4 if every_field else 0.0):
                message.ClearField(field_descriptor.name)
                continue
            self.set_field(message, field_descriptor, depth)

    def set_field(self, message: Message, field_descriptor: descriptor.FieldDescriptor, depth: int) -> None:
        name = field_descriptor.name
        repeated = field_descriptor.is_repeated
        if field_descriptor.message_type is not None and field_descriptor.message_type.GetOptions().map_entry:
            mapping = getattr(message, name)
            for _ in range(self.rng.randrange(0, 3)):
                key = self.string()[:20]
                value_field = field_descriptor.message_type.fields_by_name["value"]
                if value_field.message_type is None:
                    mapping[key] = self.scalar(value_field)
                elif depth > 0:
                    self.fill(mapping[key], depth - 1)
            return
        if field_descriptor.message_type is not None:
            if depth <= 0:
                return
            if repeated:
                container = getattr(message, name)
                del container[:]
                for _ in range(self.rng.choice([0, 1, 2, 3, 5, 30])):
                    self.fill(container.add(), depth - 1)
            else:
                self.fill(getattr(message, name), depth - 1)
            return
        if repeated:
            container = getattr(message, name)
            del container[:]
            count = self.rng.choice([0, 1, 2, 3, 384, 2001, 20_000])
            if field_descriptor.type == descriptor.FieldDescriptor.TYPE_FLOAT and self.rng.random() < 0.5:
                container.extend([self.rng.uniform(-1, 1) for _ in range(count)])
            else:
                container.extend([self.scalar(field_descriptor) for _ in range(min(count, 300))])
            return
        setattr(message, name, self.scalar(field_descriptor))

    def scalar(self, field_descriptor: descriptor.FieldDescriptor) -> Any:
        kind = field_descriptor.type
        if kind == descriptor.FieldDescriptor.TYPE_STRING:
            return self.string()
        if kind == descriptor.FieldDescriptor.TYPE_BYTES:
            return self.rng.randbytes(self.rng.choice([0, 1, 16, 5000]))
        if kind == descriptor.FieldDescriptor.TYPE_BOOL:
            return self.rng.random() < 0.5
        if kind == descriptor.FieldDescriptor.TYPE_ENUM:
            values = [value.number for value in field_descriptor.enum_type.values]
            return self.rng.choice(values) if self.rng.random() < 0.8 else self.rng.choice([-1, 99, 2**31 - 1])
        return self.number(kind)


def valid_requests() -> dict[str, Message]:
    """A valid request for each RPC: the start that structured requests change a few fields of."""
    user = conversation_pb2.Message(
        role=conversation_pb2.ROLE_USER, content=[conversation_pb2.ContentBlock(text="what do I like?")]
    )
    provider = provider_pb2.Provider(name=PROVIDER, target="127.0.0.1:1")
    memory = memory_pb2.Memory(content="The user likes tea", user_id="u1")
    memory.metadata.update({"topic": "drinks", "n": 1})
    inject = injection_pb2.InjectRequest(messages=[user], providers=[PROVIDER])
    inject.memory.stores.append(STORE)
    inject.app_state.update({"flag": True})
    return {
        "Inject": inject,
        "CreateStore": memory_pb2.CreateStoreRequest(store=memory_pb2.Store(name="fuzz-new", description="d")),
        "ListStores": memory_pb2.ListStoresRequest(page_size=2),
        "DeleteStore": memory_pb2.DeleteStoreRequest(name="fuzz-new", force=True),
        "AddMemories": memory_pb2.AddMemoriesRequest(store=STORE, memories=[memory]),
        "SearchMemories": memory_pb2.SearchMemoriesRequest(query="tea", stores=[STORE]),
        "GetMemory": memory_pb2.GetMemoryRequest(id="fuzz-1"),
        "ListMemories": memory_pb2.ListMemoriesRequest(store=STORE, page_size=2),
        "DeleteMemories": memory_pb2.DeleteMemoriesRequest(ids=["fuzz-gone"], allow_missing=True),
        "UpdateMemory": memory_pb2.UpdateMemoryRequest(
            memory=memory_pb2.Memory(id="fuzz-1", content="The user likes green tea"),
            update_mask={"paths": ["content"]},
        ),
        "ListMemoryVersions": memory_pb2.ListMemoryVersionsRequest(id="fuzz-1", page_size=2),
        "EraseMemories": memory_pb2.EraseMemoriesRequest(scope=memory_pb2.Scope(user_id="fuzz-nobody")),
        "ExportMemories": memory_pb2.ExportMemoriesRequest(stores=[STORE]),
        "ImportMemories": memory_pb2.ImportMemoriesRequest(
            memories=[memory_pb2.Memory(id="fuzz-imported", store=STORE, content="An imported fact")]
        ),
        "Remember": memory_pb2.RememberRequest(store=STORE, messages=[user], conversation_id="fuzz"),
        "RegisterProvider": provider_pb2.RegisterProviderRequest(provider=provider),
        "GetProvider": provider_pb2.GetProviderRequest(name=PROVIDER),
        "ListProviders": provider_pb2.ListProvidersRequest(page_size=1),
        "UpdateProvider": provider_pb2.UpdateProviderRequest(provider=provider, update_mask={"paths": ["priority"]}),
        "DeleteProvider": provider_pb2.DeleteProviderRequest(name="fuzz-nobody"),
        "Check": health_pb2.HealthCheckRequest(service="contextfold.v1.MemoryService"),
    }


def methods() -> Iterator[tuple[str, descriptor.MethodDescriptor]]:
    for service_name, service in SERVICES.items():
        for method in service.methods:
            yield f"/{service_name}/{method.name}", method


def prepare(channel: grpc.Channel) -> None:
    """What the valid requests name: two stores (one of another dimension) with entries, a provider."""
    valid = valid_requests()
    call = _caller(channel)
    for name, dimension in ((STORE, 0), (SMALL_STORE, 3)):
        call(
            "/contextfold.v1.MemoryService/CreateStore",
            memory_pb2.CreateStoreRequest(store=memory_pb2.Store(name=name, dimension=dimension)).SerializeToString(),
        )
    memories = [memory_pb2.Memory(id=f"fuzz-{n}", content=f"fact number {n}") for n in range(5)]
    call(
        "/contextfold.v1.MemoryService/AddMemories",
        memory_pb2.AddMemoriesRequest(store=STORE, memories=memories).SerializeToString(),
    )
    call("/contextfold.v1.ProviderService/RegisterProvider", valid["RegisterProvider"].SerializeToString())


def _caller(channel: grpc.Channel) -> Callable[[str, bytes], tuple[grpc.StatusCode, str]]:
    """A call of any method with one request's bytes: a stream of answers is read to its end (an import,
    a stream of requests, is sent this one)."""
    streaming = {path for path, method in methods() if method.server_streaming}

    def call(method: str, data: bytes) -> tuple[grpc.StatusCode, str]:
        try:
            if method == WATCH:
                # Health's watch answers at once, then whenever the status changes: its first answer is read.
                answers = channel.unary_stream(method)(data, timeout=DEADLINE)
                next(answers)
                answers.cancel()
            elif method in streaming:
                for _ in channel.unary_stream(method)(data, timeout=DEADLINE):
                    pass
            else:
                channel.unary_unary(method)(data, timeout=DEADLINE)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as error:
            return error.code(), error.details() or ""

    return call


def requests(seed: int, structured: int, mutated: int) -> Iterator[tuple[str, bytes, str]]:
    """(method, bytes, description) for each request, the same for the same seed."""
    rng = random.Random(seed)
    generator = Generator(rng)
    valid = valid_requests()
    every = list(methods())
    for _ in range(structured):
        path, method = rng.choice(every)
        start = valid.get(method.name) or message_factory.GetMessageClass(method.input_type)()
        request_type = type(start)
        if rng.random() < 0.5:
            request = request_type()
            request.CopyFrom(start)
            generator.fill(request, depth=4, every_field=False)
        else:
            request = request_type()
            generator.fill(request, depth=4)
        yield path, request.SerializeToString(), repr(request)[:2000]
    for _ in range(mutated):
        path, method = rng.choice(every)
        data = bytearray(
            (valid.get(method.name) or message_factory.GetMessageClass(method.input_type)()).SerializeToString()
        )
        for _ in range(rng.randrange(1, 6)):
            operation = rng.random()
            position = rng.randrange(0, len(data) + 1)
            if operation < 0.4 and data:
                data[min(position, len(data) - 1)] = rng.randrange(256)
            elif operation < 0.7:
                data[position:position] = rng.randbytes(rng.randrange(1, 8))
            elif data:
                del data[position : position + rng.randrange(1, 8)]
        yield path, bytes(data), data.hex()[:2000]


def run(address: str, seed: int, structured: int = 3000, mutated: int = 3000) -> Tally:
    tally = Tally()
    with grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", 4 * 1024 * 1024)]
    ) as channel:
        prepare(channel)
        call = _caller(channel)
        for index, (method, data, described) in enumerate(requests(seed, structured, mutated)):
            code, details = call(method, data)
            tally.calls += 1
            tally.codes[code.name] = tally.codes.get(code.name, 0) + 1
            if code in FAILURES or "Traceback" in details:
                tally.failures.append(Failure(seed, index, method, code.name, details, described))
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    parser.add_argument("--structured", type=int, default=3000)
    parser.add_argument("--mutated", type=int, default=3000)
    args = parser.parse_args()
    print(f"seed {args.seed}", flush=True)
    tally = run(args.address, args.seed, args.structured, args.mutated)
    print(f"{tally.calls} calls: {tally.codes}")
    for failure in tally.failures:
        print(failure)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
