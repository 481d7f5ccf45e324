"""A bulk worker: the process that runs the bulk calls the workers forward, at a lower CPU priority.

The supervisor runs `--bulk-workers` of them beside the workers (`api/lanes.py` says why). In order:
its priority lowered (`--bulk-nice`: every thread it starts after, the model's among them, inherits
it), its metrics' port, its dependencies (`wiring.build_bulk`: the database, with sessions at its
priority where they run on this machine, the model's bulk lane, the vector indexes, the purge),
then its gRPC server on its Unix socket, serving forwarded bulk calls only, and `Serving`. A call
forwarded before the socket is there waits for it (the worker's lane waits a moment). On SIGTERM,
which the supervisor sends once the workers have stopped (the calls they forwarded are done), its
calls in flight get the grace period to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from multiprocessing.connection import Connection

import grpc
from contextfold.v1 import memory_pb2_grpc

from .access.quotas import QuotaBook
from .api.lanes import BulkCalls
from .config import Config, default_quota
from .observe.logs import configure_logging
from .observe.metrics import Metrics
from .observe.usage import UsageCounters
from .postgres.listener import ChangeListener
from .postgres.pool import Database
from .process import DatabasesReached, hear_the_supervisor
from .reports import Listening, Serving
from .wiring import Shared, StartFailed, build_bulk

logger = logging.getLogger("contextfold")


async def serve_bulk(config: Config, shared: Shared, index: int, reports: Connection) -> int:
    """Serve the workers' bulk calls until told to stop; the exit code (1: it could not start, `StartFailed`)."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    metrics = Metrics(f"bulk-{index}", config.metrics_tenants)
    listener = ChangeListener(shared.owner_url, config.cache_reload_seconds)
    quotas = QuotaBook(shared.owner_url, listener, default_quota(config), config.workers)
    usage = UsageCounters(shared.owner_url, observe=metrics.count_usage)
    databases: list[Database] = []
    following = hear_the_supervisor(reports, stopping, DatabasesReached(reports, databases))
    reports.send(Listening(metrics.serve("127.0.0.1", 0)))
    async with contextlib.AsyncExitStack() as running:
        usage.start()
        running.push_async_callback(usage.close)
        starting = asyncio.create_task(build_bulk(config, shared, running, listener, metrics, quotas, usage, index))
        stop_requested = asyncio.create_task(stopping.wait())
        await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return 0
        if isinstance(starting.exception(), StartFailed):
            logger.error(
                "reason=<%s> | bulk_worker=<%d> | the bulk worker cannot start | stopping", starting.exception(), index
            )
            following.cancel()
            return 1
        services = starting.result()  # a start-up that failed otherwise raises here
        databases.extend(services.databases)
        server = grpc.aio.server(
            interceptors=[BulkCalls()],
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", 4 * config.max_message_bytes),
            ],
        )
        memory_pb2_grpc.add_MemoryServiceServicer_to_server(services.memory, server)
        server.add_insecure_port(f"unix:{shared.bulk_addresses[index]}")
        await server.start()
        gc.collect()
        gc.freeze()
        reports.send(Serving(services.embedder.name, services.embedder.dimension))
        await stop_requested
        logger.info("stopping | bulk_worker=<%d> grace_seconds=<%s>", index, config.grace_seconds)
        await server.stop(config.grace_seconds)
        following.cancel()
    logger.info("stopped | bulk_worker=<%d>", index)
    return 0


def lower_own_priority(nice: int) -> None:
    """Every thread of this process at `nice`: Linux keeps a priority per thread, and each thread inherits
    the priority of the thread that starts it, so the threads started later (the model's) have it too;
    those the interpreter started before this (importing the modules) are lowered one by one."""
    try:
        threads = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        os.nice(nice)
        return
    for thread in threads:
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))


def run_bulk_worker(config: Config, shared: Shared, index: int, reports: Connection) -> None:
    """A bulk worker process's entry point (the supervisor spawns it)."""
    lower_own_priority(config.bulk_nice)
    configure_logging(config.log_level, config.log_format, worker=f"bulk-{index}")
    try:
        code = asyncio.run(serve_bulk(config, shared, index, reports))
    finally:
        reports.close()
    sys.exit(code)
