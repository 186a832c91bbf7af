#!/usr/bin/env bash
# Runs the Dockerfile's install and start commands without Docker (there is no Docker engine in CI):
# a fresh venv, `pip install --require-hashes --no-deps -r requirements.lock`, `pip install .`, then
# `gateway db upgrade` and `gateway serve` with no network-dependent settings, and a /healthz probe
# (what the HEALTHCHECK runs). Needs the packages in pip's cache or a reachable index; takes 1-3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="$(mktemp -d)"
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --require-hashes --no-deps -r requirements.lock
# Built from a copy, as the Dockerfile's COPY does, so the checkout is not touched.
mkdir "$WORK/app"
cp -r gateway channels rag storage alembic alembic.ini config.yaml examples pyproject.toml requirements.lock "$WORK/app/"
cd "$WORK/app"
"$WORK/venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation .
"$WORK/venv/bin/python" -c "import gateway.app"
PORT="$("$WORK/venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export GATEWAY_CONFIG="$WORK/app/config.yaml" DATABASE_URL="sqlite+aiosqlite:///$WORK/app/var/gateway.db"
"$WORK/venv/bin/python" -m gateway db upgrade
# The console script too, as `docker compose exec gateway gateway …` runs it: it imports the installed copy.
"$WORK/venv/bin/gateway" db upgrade
"$WORK/venv/bin/python" -m gateway serve --host 127.0.0.1 --port "$PORT" &
PID=$!
for _ in $(seq 1 120); do
  if "$WORK/venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2)" 2>/dev/null; then
    echo "container recipe OK: /healthz answered on port $PORT"
    exit 0
  fi
  sleep 1
done
echo "container recipe FAILED: no /healthz within 120 s" >&2
exit 1
