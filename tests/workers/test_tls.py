"""torchyard.tls: a rediss:// URL always verifies the server, whoever reads it (redis-py, Celery's
kombu, channels_redis), with the private CA an agent is given."""

from __future__ import annotations

import ssl

import pytest
from celery import Celery
from torchyard import tls


def test_a_rediss_url_gets_verification_and_the_ca_file():
    url = tls.secure_redis_url("rediss://agent-3:pw@ctl.example.com:6380/0", "/etc/torchyard/ca.pem")
    assert url == "rediss://agent-3:pw@ctl.example.com:6380/0?ssl_cert_reqs=required&ssl_ca_certs=%2Fetc%2Ftorchyard%2Fca.pem"


def test_what_the_url_already_says_wins():
    url = "rediss://h:6380/0?ssl_cert_reqs=optional&ssl_ca_certs=/own/ca.pem"
    assert tls.secure_redis_url(url, "/other/ca.pem") == "rediss://h:6380/0?ssl_cert_reqs=optional&ssl_ca_certs=%2Fown%2Fca.pem"


def test_a_plain_url_is_left_alone():
    assert tls.secure_redis_url("redis://:pw@127.0.0.1:6379/5", "/ca.pem") == "redis://:pw@127.0.0.1:6379/5"


def test_celery_verifies_a_secured_url_where_it_would_not_verify_the_bare_one():
    # kombu's default for a bare rediss:// URL is CERT_NONE (with a warning): the trap closed here.
    bare = Celery("bare", broker="rediss://h:6380/0").connection_for_write()
    assert bare.ssl == {"ssl_cert_reqs": ssl.CERT_NONE}
    secured = Celery("secured", broker=tls.secure_redis_url("rediss://h:6380/0", "/ca.pem")).connection_for_write()
    assert secured.ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/ca.pem"}


def test_store_ca_writes_the_pem_once_and_refuses_what_is_not_one(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    path = tls.store_ca(tmp_path / "agent", pem)
    assert path == tmp_path / "agent" / "ca.pem" and path.read_text() == pem
    with pytest.raises(ValueError, match="not a PEM certificate"):
        tls.store_ca(tmp_path / "agent", "<html>login</html>")


def test_https_context_adds_the_ca_to_the_system_ones(tmp_path):
    assert tls.https_context(None) is None
    from torchyard_server.runtime.certs import write_certs

    written = write_certs(tmp_path / "certs", ["ctl.example.com"])
    context = tls.https_context(written.ca)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert any(c["subject"] == ((("organizationName", "Torchyard"),), (("commonName", "Torchyard private CA"),))
               for c in context.get_ca_certs())


def test_the_agent_reaches_a_server_whose_https_the_private_ca_signs(tmp_path):
    """fetch_config over real TLS (an HTTPS listener with the certificate `certs` made): refused
    without the CA, accepted with it. The answer's content is not the point here."""
    import http.server
    import json
    import threading

    from torchyard.agent.main import AgentError, fetch_config
    from torchyard_server.runtime.certs import write_certs

    written = write_certs(tmp_path / "certs", ["127.0.0.1"])

    class Config(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"auth": self.headers["Authorization"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Config)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(written.cert, written.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(AgentError, match="CERTIFICATE_VERIFY_FAILED"):
            fetch_config(url, "7.secret-secret-secret", timeout=5)
        assert fetch_config(url, "7.secret-secret-secret", timeout=5, ca_file=str(written.ca)) == {
            "auth": "Machine 7.secret-secret-secret"}
    finally:
        server.shutdown()
        server.server_close()
