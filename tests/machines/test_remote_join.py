"""What a machine on another network is told: the join command names the server as agents reach it
(TORCHYARD_PUBLIC_URL), and /api/agent/config hands over the CA of a TLS Redis."""

from __future__ import annotations

from factories import bring_online


def test_the_join_command_names_the_public_url_when_one_is_set(staff_api, settings):
    settings.PUBLIC_URL = "https://ctl.example.com:8443"
    created = staff_api.post("/api/machines", {"name": "gpu-1", "host": "10.1.0.7"}, format="json").json()
    assert created["agent_command"] == f"torchyard agent --server https://ctl.example.com:8443 --token {created['token']}"
    rotated = staff_api.post(f"/api/machines/{created['id']}/rotate-token").json()
    assert rotated["agent_command"] == f"torchyard agent --server https://ctl.example.com:8443 --token {rotated['token']}"


def test_without_a_public_url_the_join_command_names_the_address_asked(staff_api, settings):
    settings.PUBLIC_URL = ""
    created = staff_api.post("/api/machines", {"name": "gpu-2", "host": "10.1.0.8"}, format="json").json()
    assert created["agent_command"] == f"torchyard agent --server http://testserver --token {created['token']}"


def test_the_agent_config_carries_the_ca_of_a_tls_redis(anonymous, db, settings):
    _, token = bring_online("gpu-3")
    settings.AGENT_CA_PEM = ""
    assert anonymous.get("/api/agent/config", HTTP_AUTHORIZATION=f"Machine {token}").json()["ca_pem"] == ""
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    settings.AGENT_CA_PEM = pem
    assert anonymous.get("/api/agent/config", HTTP_AUTHORIZATION=f"Machine {token}").json()["ca_pem"] == pem
