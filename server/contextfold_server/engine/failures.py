"""How a source's failure is put into words for the report."""

from __future__ import annotations


class SourceFailed(Exception):
    """A source failed for a reason its message already states for people."""


def describe(error: BaseException) -> str:
    return str(error) if isinstance(error, SourceFailed) else f"{type(error).__name__}: {error}"
