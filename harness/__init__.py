"""What the tests and the benchmarks run against, shared by both and shipped in no package.

Our own processes, for real: the server as `make run` starts it, Postgres from the embedded
package, provider processes (`servers.py`, `providers.py`); the one way they wait (`polling.py`);
the heaviest legal requests (`heavy_requests.py`). And, under `stand_ins/`, loopback stand-ins for
the third-party APIs we cannot run here (a chat model, an embeddings API, a reranker, an
OpenTelemetry collector), each recording what it was sent.
"""
