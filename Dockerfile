# contextfold: one replica of the gRPC service. It holds no state of its own: point it at a
# Postgres with pgvector (CONTEXTFOLD_DATABASE_URL) and run as many replicas as the load needs.
#
#   docker build -t contextfold:0.1.0 .
#   docker run -p 50051:50051 -p 9464:9464 -e CONTEXTFOLD_DATABASE_URL=postgresql://… contextfold:0.1.0
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    CONTEXTFOLD_HOST=0.0.0.0 \
    CONTEXTFOLD_ADMIN_HOST=0.0.0.0 \
    CONTEXTFOLD_LOG_FORMAT=json

WORKDIR /opt/contextfold
COPY constraints.txt pyproject.toml README.md ./
COPY client/python client/python
COPY server server
# torch from its CPU index first (the PyPI wheel pulls CUDA), then everything else, pinned.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" \
    && pip install -c constraints.txt ./client/python . \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin contextfold

USER 10001
# Caches (the tokenizer, the model's) go to /tmp: the root filesystem may be read-only.
ENV HOME=/tmp
EXPOSE 50051 9464
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
    CMD ["python", "-c", "import grpc, sys; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; s = g.HealthStub(grpc.insecure_channel('127.0.0.1:50051')).Check(h.HealthCheckRequest(), timeout=2).status; sys.exit(s != h.HealthCheckResponse.SERVING)"]
ENTRYPOINT ["contextfold", "serve"]
