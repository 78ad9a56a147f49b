"""docker-compose.yml describes the production stack; Compose's own parser checks it (no engine
needed) and the commands it runs must exist in this code base."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import compose

ROOT = Path(__file__).resolve().parent.parent
BINARY = Path(compose.__file__).parent / "docker-compose"


def compose_config() -> dict:
    result = subprocess.run([str(BINARY), "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_compose_file_is_valid_and_has_the_production_stack():
    services = compose_config()["services"]
    assert {"postgres", "redis", "minio", "web", "controller", "beat", "ingest", "agent-1", "migrate"} <= set(services)
    assert services["web"]["environment"]["DATABASE_URL"].startswith("postgres://")
    assert services["web"]["environment"]["TORCHYARD_STORAGE_URL"].startswith("s3://")


def test_the_commands_it_runs_exist():
    services = compose_config()["services"]
    commands = {name: " ".join(s.get("command") or []) for name, s in services.items()}
    management = {p.stem for p in (ROOT / "backend").rglob("management/commands/*.py") if p.stem != "__init__"}
    assert "ingest_events" in commands["ingest"] and "ingest_events" in management
    assert "register_machine" in commands["migrate"] and "register_machine" in management
    assert "torchyard_server.asgi:application" in commands["web"]
    assert commands["agent-1"].startswith("torchyard agent")
