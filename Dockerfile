# syntax=docker/dockerfile:1
# Multi-stage: the builder installs the hash-pinned lock into a venv; the runtime image copies only the venv
# and the source, runs as a non-root user, and needs no network at start (models are in the repo/wheel,
# LiteLLM's price map is the bundled one, the model hub is off).
# The same commands run in CI without Docker: scripts/container-smoke.sh.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
RUN python -m venv /opt/venv
COPY requirements.lock pyproject.toml ./
RUN /opt/venv/bin/python -m pip install --require-hashes --no-deps -r requirements.lock
COPY gateway ./gateway
COPY channels ./channels
COPY rag ./rag
COPY storage ./storage
COPY alembic ./alembic
COPY alembic.ini config.yaml ./
COPY examples ./examples
RUN /opt/venv/bin/python -m pip install --no-deps --no-build-isolation . \
 && HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True /opt/venv/bin/python -c "import gateway.app"

FROM python:3.11-slim AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    TOKENIZERS_PARALLELISM=false \
    PYTHONUNBUFFERED=1 \
    HOST=0.0.0.0 \
    PORT=8000 \
    GATEWAY_CONFIG=/app/config.yaml
RUN useradd --create-home --uid 10001 gateway
WORKDIR /app
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder --chown=gateway:gateway /app /app
RUN mkdir -p /app/var && chown gateway:gateway /app/var
USER gateway
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD python -c "import os,urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ.get(\"PORT\",\"8000\")}/healthz', timeout=2)" || exit 1
# Migrations are idempotent: every replica may run them at start (alembic/env.py takes an advisory lock on PostgreSQL).
CMD ["sh", "-c", "python -m gateway db upgrade && exec python -m gateway serve --host \"$HOST\" --port \"$PORT\""]
