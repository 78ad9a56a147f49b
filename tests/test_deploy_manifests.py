"""The production install's files: `torchyard-server certs` makes a CA and a server certificate
that a real TLS handshake accepts; the kustomize overlays build with kubectl's kustomize and every
resource passes kubernetes-validate (backend/deploy/check.py, what `make lint` runs); the Grafana
dashboard and Prometheus config fit what the compose profile provisions. That the dashboard's
metrics exist on a live /metrics: tests/integration/test_remote_agent_tls.py."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from torchyard_server.runtime.certs import main as certs_main

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "backend" / "deploy"
SERVER = Path(sys.executable).with_name("torchyard-server")
OBSERVABILITY = DEPLOY / "observability"


def load_check():
    spec = importlib.util.spec_from_file_location("deploy_check", DEPLOY / "check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check = load_check()


# --- certs --------------------------------------------------------------------------------------
def certs_argv(out: Path, *hosts: str, extra: tuple[str, ...] = ()) -> list[str]:
    return ["--out", str(out), *(f"--host={h}" for h in hosts), *extra]


def make_certs(out: Path, *hosts: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The command as a user runs it."""
    return subprocess.run([str(SERVER), "certs", *certs_argv(out, *hosts, extra=extra)],
                          capture_output=True, text=True, timeout=60)


def certs_in_process(capsys, out: Path, *hosts: str, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """The same command's code, without a new interpreter (each costs seconds on a busy machine)."""
    try:
        code = certs_main(certs_argv(out, *hosts, extra=extra))
    except SystemExit as exc:  # argparse's refusals
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def handshake(certs: Path, server_name: str, ca: Path) -> str:
    """One TLS handshake: a server on 127.0.0.1 with server.pem, a client trusting `ca` and asking
    for `server_name`. Returns what the server sent back, or raises the client's ssl error."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hello over tls")
        except (ssl.SSLError, OSError):
            pass  # the client refused us: that is what the caller checks

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client_context = ssl.create_default_context(cafile=str(ca))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client_context.wrap_socket(raw, server_hostname=server_name) as tls:
            return tls.recv(100).decode()
    finally:
        thread.join(timeout=10)
        listener.close()


def test_certs_makes_a_ca_and_a_server_certificate_a_tls_client_accepts(tmp_path):
    out = tmp_path / "certs"
    result = make_certs(out, "ctl.example.com", "203.0.113.7")
    assert result.returncode == 0, result.stderr
    assert "created the authority" in result.stdout
    for name in ("ca-key.pem", "server-key.pem"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    assert handshake(out, "ctl.example.com", out / "ca.pem") == "hello over tls"
    assert handshake(out, "203.0.113.7", out / "ca.pem") == "hello over tls"
    assert handshake(out, "redis", out / "ca.pem") == "hello over tls"  # the compose services' names
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
        handshake(out, "elsewhere.example.com", out / "ca.pem")
    # MinIO's layout points at the same files.
    assert (out / "public.crt").resolve() == (out / "server.pem").resolve()
    assert (out / "CAs" / "ca.pem").read_bytes() == (out / "ca.pem").read_bytes()


def test_certs_run_again_keeps_the_authority_and_new_ca_replaces_it(tmp_path, capsys):
    out = tmp_path / "certs"
    assert certs_in_process(capsys, out, "ctl.example.com")[0] == 0
    ca = (out / "ca.pem").read_bytes()
    code, stdout, _ = certs_in_process(capsys, out, "ctl.example.com", "gpu-gw.example.com")
    assert code == 0 and "reused the authority" in stdout
    assert (out / "ca.pem").read_bytes() == ca
    # Agents that trust the old ca.pem accept the new name.
    kept = tmp_path / "agent-ca.pem"
    kept.write_bytes(ca)
    assert handshake(out, "gpu-gw.example.com", kept) == "hello over tls"

    assert certs_in_process(capsys, out, "ctl.example.com", extra=("--new-ca",))[0] == 0
    assert (out / "ca.pem").read_bytes() != ca
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(out, "ctl.example.com", kept)


@pytest.mark.parametrize("host", ["https://ctl.example.com", "ctl.example.com:8443", "two words", "-bad-.example"])
def test_certs_refuses_what_is_not_a_host_name_or_address(tmp_path, capsys, host):
    code, _, stderr = certs_in_process(capsys, tmp_path / "certs", host)
    assert code == 2
    assert "neither a host name nor an IP address" in stderr
    assert not (tmp_path / "certs").exists()


# --- Kubernetes ---------------------------------------------------------------------------------
def built(overlay: str) -> list[dict]:
    text = check.kustomize_build(check.KUSTOMIZE_ROOT / overlay)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_every_compose_file_and_kustomization_passes_the_lint_check():
    assert {p.relative_to(check.KUSTOMIZE_ROOT).as_posix() for p in check.kustomizations()} >= {
        "base", "overlays/production", "overlays/staging"}
    assert check.check_all() == []


def test_the_production_overlay_is_the_control_plane_alone_with_probes_and_requests():
    resources = built("overlays/production")
    kinds = {(r["kind"], r["metadata"]["name"]) for r in resources}
    assert {("Deployment", f"torchyard-{n}") for n in ("web", "controller", "beat", "ingest")} <= kinds
    assert {("Job", "torchyard-migrate"), ("Service", "torchyard-web"), ("Ingress", "torchyard"),
            ("ConfigMap", "torchyard-config"), ("Secret", "torchyard-secrets")} <= kinds
    # Embedded-free: no database, Redis or object store runs in the cluster.
    assert not {kind for kind, _ in kinds} & {"StatefulSet", "PersistentVolumeClaim"}
    assert all(r["metadata"].get("namespace") == "torchyard" for r in resources if r["kind"] != "Namespace")
    for resource in resources:
        if resource["kind"] not in ("Deployment", "Job"):
            continue
        (container,) = resource["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/torchyard:0.1.0"
        assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), resource["metadata"]["name"]
        assert {"torchyard-config", "torchyard-secrets"} == {
            next(iter(ref.values()))["name"] for ref in container["envFrom"]}
    web = next(r for r in resources if r["kind"] == "Deployment" and r["metadata"]["name"] == "torchyard-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/api/health"
    beat = next(r for r in resources if r["kind"] == "Deployment" and r["metadata"]["name"] == "torchyard-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    config = next(r for r in resources if r["kind"] == "ConfigMap" and r["metadata"]["name"] == "torchyard-config")
    assert config["data"]["TORCHYARD_AGENT_REDIS_URL"].startswith("rediss://")
    assert config["data"]["TORCHYARD_PUBLIC_URL"].startswith("https://")


def test_a_resource_kubernetes_would_refuse_fails_the_check(tmp_path):
    copy = tmp_path / "kubernetes"
    shutil.copytree(check.KUSTOMIZE_ROOT, copy)
    beat = copy / "base" / "beat.yaml"
    beat.write_text(beat.read_text().replace("terminationGracePeriodSeconds", "terminationGracePeriodSecs"))
    text = check.kustomize_build(copy / "overlays" / "production")
    with pytest.raises(check.CheckFailed, match="terminationGracePeriodSecs"):
        check.validate_manifests(text, "broken")
    # And a kustomization naming a file that is not there does not build.
    (copy / "base" / "ingress.yaml").unlink()
    with pytest.raises(check.CheckFailed, match="ingress.yaml"):
        check.kustomize_build(copy / "overlays" / "production")


# --- observability ------------------------------------------------------------------------------
def dashboard() -> dict:
    return json.loads((OBSERVABILITY / "grafana" / "dashboards" / "torchyard.json").read_text())


def dashboard_expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_the_dashboard_queries_the_provisioned_datasource():
    datasources = yaml.safe_load((OBSERVABILITY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090"  # the compose service
    panels = [p for p in dashboard()["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"]["uid"] == source["uid"] for p in panels)
    assert all(p["targets"] and all(t["expr"].strip() for t in p["targets"]) for p in panels)
    providers = yaml.safe_load((OBSERVABILITY / "grafana" / "provisioning" / "dashboards" / "torchyard.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/etc/grafana/dashboards"


def test_prometheus_scrapes_the_web_process_with_the_metrics_token():
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["web:8000"]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/metrics-token"}
    # Every name the dashboard uses is Torchyard's, or Prometheus's own `up`.
    names = {n for expr in dashboard_expressions() for n in re.findall(r"\b(torchyard_\w+|up)\b", expr)}
    assert "up" in names and len(names) > 8
