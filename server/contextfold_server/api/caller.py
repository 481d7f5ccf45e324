"""Who is calling: the namespace (tenant) a call acts in."""

from __future__ import annotations

import grpc

DEFAULT_NAMESPACE = "default"


def caller_namespace(context: grpc.aio.ServicerContext) -> str:
    """Every call acts in the `default` namespace until API keys map callers to their own."""
    return DEFAULT_NAMESPACE
