"""Helpers to run real `python -m gateway serve` replicas as subprocesses (shared by tests and bench)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "123456:TEST-replica-token"
SECRET = "replica-secret_1"
OPERATOR_TOKEN = "replica-operator-token-1"


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replica_config(tmp: Path, *, database_url: str, telegram_api: str, index: int, lease_seconds: float = 2,
                   models: list[dict] | None = None, model: str | None = None, extra_bot: dict | None = None,
                   web_chat: bool = False, **top) -> Path:
    """A config for one replica: one Telegram bot, no knowledge sources, its own Qdrant folder."""
    # No escalation: with no knowledge every answer is a refusal, and three in a row would hand off.
    telegram = {"token": "${GW_REPLICA_TG_TOKEN}", "webhook_secret": "${GW_REPLICA_TG_SECRET}", "api_base": telegram_api}
    bot = {"name": "shop", "escalation": {"enabled": False},
           "channels": {"web": {} if web_chat else None, "telegram": telegram}}
    if model:
        bot["model"] = model
    bot.update(extra_bot or {})
    data = {
        "database_url": database_url,
        # Qdrant local mode allows one process per folder, so each replica gets its own (no sources anyway).
        "qdrant": {"path": str(tmp / f"qdrant-{index}")},
        # burst_seconds 0: each message here is a question of its own, answered on its own, however close
        # together they come (bursts have their own tests: tests/gateway_channels/test_telegram_bursts.py).
        "worker": {"lease_seconds": lease_seconds, "poll_interval": 0.2, "reply_timeout": 30, "burst_seconds": 0,
                   **top.pop("worker", {})},
        "log_level": "WARNING",
        "models": models or [],
        "bots": [bot],
        **top,
    }
    path = tmp / f"replica-{index}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1", GW_REPLICA_TG_TOKEN=TOKEN, GW_REPLICA_TG_SECRET=SECRET,
               GW_REPLICA_OP_TOKEN=OPERATOR_TOKEN)
    env.pop("DATABASE_URL", None)
    return env


def db_upgrade(config: Path) -> None:
    """Run `gateway db upgrade` exactly as an operator would."""
    subprocess.run([sys.executable, "-m", "gateway", "db", "upgrade", "--config", str(config)], cwd=ROOT,
                   env=_env(), check=True, capture_output=True, timeout=120)


@dataclass
class Replica:
    """One running server process."""

    config: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    role: str = "all"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Spawn `python -m gateway serve` on this replica's port."""
        self.log_path = self.config.with_suffix(f".{self.port}.log")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--config", str(self.config), "--host", "127.0.0.1",
                 "--port", str(self.port), "--role", self.role], cwd=ROOT, env=_env(), stdout=out,
                stderr=subprocess.STDOUT)

    async def wait_ready(self, timeout: float = 180.0) -> None:
        """Poll /healthz until it answers (importing LiteLLM alone takes 5-25 s on a busy machine)."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"replica exited {self.proc.returncode}:\n{self.log()}")
                try:
                    if (await client.get(self.url + "/healthz", timeout=1)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise TimeoutError(f"replica on {self.port} not ready:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, leases stay held until they expire."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path and self.log_path.exists() else ""


def telegram_update(update_id: int, *, chat_id: int, text: str) -> dict:
    """A private-chat text message update, as Telegram posts it."""
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000, "text": text,
        "chat": {"id": chat_id, "type": "private", "first_name": "C"},
        "from": {"id": chat_id, "is_bot": False, "first_name": "C"}}}
