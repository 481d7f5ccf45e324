"""A clock provider: tells the model the current time, in UTC, on every turn.

python examples/providers/clock.py 127.0.0.1:50061
contextfold providers register clock --target 127.0.0.1:50061 --trigger every_turn
"""

import logging
import sys
from datetime import UTC, datetime

from contextfold.provider import ProvideContext, serve_provider


def now(context: ProvideContext) -> str:
    return f"<now>{datetime.now(UTC).isoformat(timespec='seconds')}</now>"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    serve_provider(now, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50061")
