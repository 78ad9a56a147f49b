"""docker-compose.yml describes the production stack; Compose's own parser checks it (no engine
needed) and the commands it runs must exist in this code base."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import compose

ROOT = Path(__file__).resolve().parent.parent
BINARY = Path(compose.__file__).parent / "docker-compose"


EXAMPLE_ENV = ROOT / "backend" / "deploy" / "compose" / "example.env"


def compose_config(*profiles: str, env_file: Path = EXAMPLE_ENV) -> dict:
    argv = [str(BINARY), "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml")]
    for profile in profiles:
        argv += ["--profile", profile]
    result = subprocess.run([*argv, "config", "--format", "json"], capture_output=True, text=True, timeout=60)
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


def published(service: dict) -> dict[int, str]:
    """Container port -> the host address it is published on ("" for every address)."""
    return {int(p["target"]): p.get("host_ip", "") for p in service.get("ports") or []}


def test_remote_agents_get_redis_over_tls_with_a_password_and_a_user_of_their_own():
    services = compose_config()["services"]
    redis, env = services["redis"], services["web"]["environment"]
    command = redis["command"]
    # Only the TLS port leaves the host; the plain one stays on the compose network.
    assert published(redis) == {6380: ""}
    assert command[command.index("--tls-port") + 1] == "6380"
    assert command[command.index("--requirepass") + 1] == "change-me-redis"
    assert {"--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file"} <= set(command)
    assert env["REDIS_URL"] == "redis://:change-me-redis@redis:6379/0"
    assert env["TORCHYARD_AGENT_REDIS_URL"] == "rediss://ctl.example.com:6380/0"
    assert env["TORCHYARD_REDIS_AGENT_ACL"] == "1"
    assert env["TORCHYARD_AGENT_CA_FILE"] == "/certs/ca.pem"
    # The join command names the public HTTPS address; S3 and the web are published over TLS.
    assert env["TORCHYARD_PUBLIC_URL"] == "https://ctl.example.com:8443"
    assert published(services["web"]) == {8443: "", 8000: "127.0.0.1"}
    assert "ssl:8443:privateKey=/certs/server-key.pem:certKey=/certs/server.pem" in services["web"]["command"]
    assert 9000 in published(services["minio"]) and "--certs-dir" in services["minio"]["command"]


def test_a_missing_secret_is_refused_by_name(tmp_path):
    env = tmp_path / ".env"
    env.write_text("\n".join(line for line in EXAMPLE_ENV.read_text().splitlines()
                             if not line.startswith("REDIS_PASSWORD=")))
    argv = [str(BINARY), "--env-file", str(env), "-f", str(ROOT / "docker-compose.yml"), "config", "-q"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "set REDIS_PASSWORD in .env" in result.stderr


def test_the_certs_and_observability_services_run_only_when_asked_for():
    assert not {"certs", "prometheus", "grafana"} & set(compose_config()["services"])
    services = compose_config("setup", "observability")["services"]
    assert services["certs"]["command"][:2] == ["torchyard-server", "certs"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert {c["target"] for c in prometheus["configs"]} == {"/etc/prometheus/prometheus.yml", "/etc/prometheus/metrics-token"}
    mounts = {v["target"]: v["source"] for v in grafana["volumes"]}
    assert mounts["/etc/grafana/dashboards"].endswith("backend/deploy/observability/grafana/dashboards")
