"""The production install's remote-agent path, as far as one machine allows: an agent on another
"host" (a network namespace, netns.py) joins with `torchyard agent --server URL --token T` and
reaches Redis only over TLS, with a password, as docker-compose.yml publishes it.

The Redis is a real redis-server with its plain port off (`--port 0`), a TLS port, a certificate
made by `torchyard-server certs` for the bridge address, and `--requirepass`. The control plane
(web, controller, beat, ingest: Celery, Channels and the ingest over TLS too) connects as the
default user; the agent gets a user of its own (TORCHYARD_REDIS_AGENT_ACL) and the authority's
certificate from /api/agent/config (TORCHYARD_AGENT_CA_FILE), nothing else: its URL names no CA
file. It must come online, keep heartbeating and run a job whose events cross the TLS link.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from .netns import RedisServer, _free_port, netns_unavailable, separate_hosts
from .stack import ROOT

BIN = Path(sys.executable).parent
METRICS_TOKEN = secrets.token_urlsafe(24)
DASHBOARD = ROOT / "backend" / "deploy" / "observability" / "grafana" / "dashboards" / "torchyard.json"
# Series Prometheus makes itself for every target, not the target's.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")


@dataclass
class TlsRedisServer(RedisServer):
    """redis-server speaking TLS alone (no plain port), a password on its default user."""

    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def certs(self) -> Path:
        return self.workdir / "certs"

    @property
    def url(self) -> str:
        query = urlencode({"ssl_ca_certs": str(self.certs / "ca.pem"), "ssl_cert_reqs": "required"})
        return f"rediss://:{self.password}@{self.address}:{self.port}/0?{query}"

    @property
    def agent_url(self) -> str:
        # No user, password or CA file: the server adds the agent's user, the agent the CA it is handed.
        return f"rediss://{self.address}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not (self.certs / "server.pem").exists():
            subprocess.run([str(BIN / "torchyard-server"), "certs", "--out", str(self.certs), "--host", self.address],
                           check=True, capture_output=True, timeout=60)
        self.port = self.port or _free_port(self.address)
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", self.address, "--port", "0", "--tls-port", str(self.port),
             "--tls-cert-file", str(self.certs / "server.pem"), "--tls-key-file", str(self.certs / "server-key.pem"),
             "--tls-ca-cert-file", str(self.certs / "ca.pem"), "--tls-auth-clients", "no",
             "--requirepass", self.password, "--save", "", "--appendonly", "yes",
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log"), "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} (built without TLS?):\n{log}")
            try:
                if redis.Redis.from_url(self.url, socket_connect_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"TLS redis-server on {self.address}:{self.port} did not answer within {timeout:.0f}s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("remote-tls")
    # separate_hosts makes the Redis under tmp/redis: its certificates are tmp/redis/certs.
    env = {"TORCHYARD_REDIS_AGENT_ACL": "1", "TORCHYARD_AGENT_CA_FILE": str(tmp / "redis" / "certs" / "ca.pem"),
           "TORCHYARD_METRICS_TOKEN": METRICS_TOKEN}
    with separate_hosts(tmp, hosts=1, env=env, redis_factory=TlsRedisServer) as made:
        yield made


def test_a_remote_agent_joins_over_tls_with_its_own_user_and_runs_a_job(cluster):
    host, server = cluster.hosts[0], cluster.redis
    assert isinstance(server, TlsRedisServer)

    # What the agent was handed: its own user on the TLS port, and the authority to trust.
    config = cluster.stack.session.get(cluster.stack.base + "/api/agent/config",
                                       headers={"Authorization": f"Machine {host.token}"}, timeout=10).json()
    assert config["redis_url"].startswith(f"rediss://agent-{host.machine_id}:")
    assert config["ca_pem"] == (server.certs / "ca.pem").read_text()
    assert (host.work_dir / "ca.pem").read_text() == config["ca_pem"]

    # Its connections come from its namespace's address, as its own user (there is no plain port).
    # A connection that has sent nothing yet (cmd NULL: mid TLS handshake, before its AUTH) is listed
    # as the default user whoever it will become; every one that has spoken must be the agent's user.
    admin = redis.Redis.from_url(server.url)
    clients = [c for c in admin.client_list()
               if c["addr"].startswith(host.address + ":") and c.get("cmd", "NULL") != "NULL"]
    assert clients and {c["user"] for c in clients} == {f"agent-{host.machine_id}"}, clients

    # Heartbeats keep arriving over that link.
    first = cluster.machine(host)["last_heartbeat"]
    deadline = time.monotonic() + 15
    while cluster.machine(host)["last_heartbeat"] == first:
        assert time.monotonic() < deadline, f"no new heartbeat since {first}\n{host.agent_log_tail()}"
        time.sleep(0.5)

    job = cluster.stack.submit({"name": "over-tls", "entrypoint": "examples/mlp_ddp.py",
                                "args": ["--steps", "20", "--step-sleep", "0.02"],
                                "resources": {"nodes": 1, "procs_per_node": 1},
                                "fault_tolerance": {"max_restarts": 0}})
    done = cluster.stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
    assert done["status"] == "completed", f"{done['status_reason']}\n{host.agent_log_tail()}"
    assert done["plan"]["nodes"][0]["machine_id"] == host.machine_id
    # The rank's output came back through the supervisor's event stream, over TLS.
    assert any("rank 0: done at step 20" in e["line"] for e in cluster.stack.logs(job["id"]))


def test_the_redis_refuses_clients_without_the_authority_or_the_password(cluster):
    server = cluster.redis
    assert isinstance(server, TlsRedisServer)
    plain = f"redis://{server.address}:{server.port}/0"
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(plain, socket_connect_timeout=2, socket_timeout=2).ping()
    # TLS, but trusting only the system's authorities: the private certificate is refused.
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        redis.Redis.from_url(f"rediss://:{server.password}@{server.address}:{server.port}/0",
                             socket_connect_timeout=2).ping()
    wrong = server.url.replace(server.password, "wrong-password")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(wrong, socket_connect_timeout=2).ping()


def dashboard_selectors() -> list[tuple[str, set[str]]]:
    """(metric name, label names it is filtered or grouped by) for every metric the Grafana
    dashboard's queries read."""
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            grouped = {label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}
            for name, matchers in re.findall(r"\b([a-z_]+)\s*(?:\{([^}]*)\})?\s*(?:\[[^\]]*\])?", expr):
                if name.startswith("torchyard_") or name in PROMETHEUS_OWN:
                    found.append((name, set(re.findall(r"(\w+)\s*[=!]~?", matchers or "")) | grouped))
    return found


def test_the_grafana_dashboard_reads_only_metrics_this_stack_exposes(cluster):
    # As Prometheus reads it (backend/deploy/observability/prometheus.yml): the bearer token.
    response = cluster.stack.session.get(cluster.stack.base + "/metrics", timeout=10,
                                         headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200, response.text
    # Every series name a family stands for (a counter's samples end in _total), and the label names
    # its samples carry (a family may have none yet: usage by project before any job ran here).
    labels: dict[str, set[str] | None] = {}
    for family in text_string_to_metric_families(response.text):
        for name in (family.name, f"{family.name}_total") if family.type == "counter" else (family.name,):
            labels[name] = set().union(*(s.labels for s in family.samples)) if family.samples else None
    selectors = dashboard_selectors()
    assert len({name for name, _ in selectors}) > 8
    for name, used in selectors:
        if name in PROMETHEUS_OWN:
            continue
        assert name in labels, f"the dashboard reads {name}, which /metrics does not expose: {sorted(labels)}"
        have = labels[name]
        if have is not None:
            assert used <= have, f"{name}: the dashboard uses labels {used - have} it does not have"
    assert labels["torchyard_jobs"] == {"state"}  # every state is always there, 0 included


def test_the_agent_refuses_a_ca_file_that_is_not_there(tmp_path):
    token = "1.not-a-real-secret"
    result = subprocess.run([str(BIN / "torchyard"), "agent", "--server", "http://127.0.0.1:9", "--token", token,
                             "--ca-file", str(tmp_path / "missing.pem"), "--work-dir", str(tmp_path / "w")],
                            capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                            env={k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")})
    assert result.returncode != 0
    assert f"--ca-file: {tmp_path / 'missing.pem'} is not a file" in result.stderr

