"""Customizations callers send over the wire: CEL triggers and queries, Jinja2 format templates.

A remote service cannot run the caller's code, so the reference's callbacks
become declarative: expressions and templates that are checked when a request
(or registration) arrives, and run in a sandboxed worker process, within
limits of size, time and memory, so no expression or template can stall or
crash the service.
"""
