"""The one way the server calls HTTP APIs: the embeddings endpoint, the reranker and the extractor.

Each is an endpoint the operator named, and its calls carry the operator's API key: they go there
and nowhere else. So no redirect is followed (one could lead the key to a host nobody named), and
nothing is taken from the process's environment (proxy variables, `.netrc`): what a container
inherits must not re-route calls that carry keys.
"""

from __future__ import annotations

import httpx


def http_client(api_key: str = "", base_url: str = "", timeout: float = 5.0) -> httpx.AsyncClient:
    """A client for one named endpoint, sending `api_key` as a bearer token when there is one; a call
    waits `timeout` seconds at most unless it says otherwise."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )
