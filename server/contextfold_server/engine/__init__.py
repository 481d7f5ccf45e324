"""The injection engine: trigger, query, rank, format and fold.

A pure core: it knows conversations, entries and text, and reaches memory only
through the `MemorySearch` port it is handed. No gRPC and no SQL live here, so
every rule of the reference behaviour can be read, and tested, on its own.
"""
