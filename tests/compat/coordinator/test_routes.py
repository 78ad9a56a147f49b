"""The Rust coordinator's routes at its root paths: JSON (the dashboard only for a browser's page loads), its
`{"world_size": N}` body as a job of its demo worker, FastAPI's error shape for a body it cannot
take, and peer authentication on loopback for the server's own OS user."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from django.test import RequestFactory
from torchyard_server.accounts.local_peer import is_same_user_on_loopback, socket_owner

pytestmark = pytest.mark.django_db

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def test_the_seed_routes_answer_json_and_a_browser_page_load_gets_the_dashboard(api, anonymous, two_machines):
    health = anonymous.get("/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    job_id = api.post("/jobs", {"world_size": 2}, format="json").json()["job_id"]
    for path in ("/jobs", "/jobs/summaries", f"/jobs/{job_id}", f"/jobs/{job_id}/summary", f"/jobs/{job_id}/logs"):
        for accept in ("*/*", "application/json"):
            response = api.get(path, HTTP_ACCEPT=accept)
            assert response.status_code == 200 and response["Content-Type"] == "application/json", (path, accept)
    assert api.get("/jobs").json()[0]["id"] == job_id
    assert api.get(f"/jobs/{job_id}").json()["name"] == "demo-worker"  # no job_id, no JOB_ID on the server
    assert api.get(f"/jobs/{job_id}/summary").json()["status"] == "queued"
    for path in ("/jobs", f"/jobs/{job_id}"):
        page = api.get(path, HTTP_ACCEPT=BROWSER)
        assert page["Content-Type"].startswith("text/html"), path  # the built app, or the page saying to build it
    stopped = api.post(f"/jobs/{job_id}/stop", HTTP_ACCEPT="*/*")
    assert stopped.status_code == 202 and stopped.json()["id"] == job_id
    purge = api.post("/jobs/purge", {"older_than_days": 0, "dry_run": True}, format="json")
    assert purge.status_code == 200 and purge.json()["dry_run"] is True


def test_world_size_starts_the_demo_worker_with_the_seed_settings(api, two_machines, settings):
    settings.SEED001_DEFAULTS = {"sleep_sec": 0.25, "checkpoint_every": 9}
    response = api.post("/jobs", {"world_size": 4, "job_id": "my-job", "checkpoint_every": 3,
                                  "dataset_dir": "/data/shards", "heartbeat_timeout": 20, "max_restarts": 7},
                        format="json")
    assert response.status_code == 201, response.json()
    job = response.json()
    assert job["job_id"] == job["id"] and job["name"] == "my-job" and job["status"] == "queued"
    spec = job["spec"]
    assert spec["entrypoint"] == "examples/seed001_worker.py" and spec["resources"]["workers"] == 4
    # The body wins over the server's defaults (SLEEP_SEC there, CHECKPOINT_EVERY here).
    assert spec["env"] == {"CHECKPOINT_EVERY": "3", "SLEEP_SEC": "0.25", "DATASET_DIR": "/data/shards"}
    assert spec["checkpointing"]["enabled"] and spec["checkpointing"]["every_n_steps"] == 3
    assert spec["fault_tolerance"]["heartbeat_timeout"] == 20 and spec["fault_tolerance"]["max_restarts"] == 7
    assert spec["fault_tolerance"]["restart_delay"] == 0.5  # the coordinator's 500 ms, then doubling


def test_the_servers_job_id_and_world_size_are_the_bodys_defaults(api, two_machines, settings):
    settings.SEED001_DEFAULTS = {"job_id": "my-job", "world_size": 3}
    job = api.post("/jobs", {}, format="json").json()
    assert job["name"] == "my-job" and job["spec"]["resources"]["workers"] == 3, job
    job = api.post("/jobs", {"world_size": 2, "job_id": "other"}, format="json").json()
    assert job["name"] == "other" and job["spec"]["resources"]["workers"] == 2, job


def error(kind: str, field: str | None, value=None, msg: str | None = None) -> dict:
    item = {"type": kind, "loc": ["body", field] if field else ["body"], "input": value}
    return {**item, "msg": msg} if msg else item


@pytest.mark.parametrize(("body", "expected"), [
    ({"world_size": 4, "gpus": 2}, [error("extra_forbidden", "gpus", 2, "Extra inputs are not permitted")]),
    ({}, [error("missing", "world_size", msg="Field required")]),
    ({"world_size": 0}, [error("greater_than_equal", "world_size", 0)]),
    ({"world_size": "four"}, [error("int_parsing", "world_size", "four")]),
    ({"world_size": 2, "heartbeat_timeout": 1}, [error("greater_than_equal", "heartbeat_timeout", 1)]),
    ([4], [error("model_attributes_type", None, [4])]),
])
def test_a_body_the_seed_would_refuse_gets_fastapis_error_shape(api, two_machines, body, expected):
    response = api.post("/jobs", body, format="json")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [{k: item[k] for k in expected[i]} for i, item in enumerate(detail)] == expected
    assert all(set(item) == {"type", "loc", "msg", "input"} and item["msg"] for item in detail)


def test_a_body_that_is_not_json_is_refused_in_the_same_shape(api):
    response = api.post("/jobs", data="{world_size: 4", content_type="application/json")
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"


def test_without_credentials_the_seed_routes_are_refused_like_the_others(anonymous, two_machines):
    assert anonymous.post("/jobs", {"world_size": 1}, format="json").status_code == 401
    assert anonymous.get("/jobs/summaries").status_code == 401


def test_peer_authentication_knows_the_servers_own_user_and_nothing_else():
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            address, port = client.getsockname()
            server_port = server.getsockname()[1]
            assert socket_owner((address, port), server_port) == socket_owner((f"::ffff:{address}", port), server_port)
            meta = {"REMOTE_ADDR": address, "REMOTE_PORT": port, "SERVER_PORT": str(server_port)}
            assert is_same_user_on_loopback(RequestFactory().get("/jobs", **meta))
            # A browser, a proxy's word, a socket that is not the client's: refused.
            for extra in ({"HTTP_ORIGIN": "http://evil.example"}, {"HTTP_SEC_FETCH_SITE": "cross-site"},
                          {"HTTP_COOKIE": "a=b"}, {"HTTP_X_FORWARDED_FOR": "127.0.0.1"},
                          {"REMOTE_PORT": server_port}, {"SERVER_PORT": str(port)}):
                assert not is_same_user_on_loopback(RequestFactory().get("/jobs", **{**meta, **extra})), extra


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
def test_peer_authentication_refuses_another_local_user():
    with socket.create_server(("127.0.0.1", 0)) as server:
        server_port = server.getsockname()[1]
        # A client of user nobody (65534) that connects and waits (the system Python: the venv may be private).
        client = subprocess.Popen(
            ["/usr/bin/python3", "-c", "import socket, sys, time; s = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); "
                                   "print(s.getsockname()[1], flush=True); time.sleep(30)", str(server_port)],
            user=65534, stdout=subprocess.PIPE, text=True)
        try:
            port = int(client.stdout.readline())
            accepted, _ = server.accept()
            with accepted:
                assert socket_owner(("127.0.0.1", port), server_port) == 65534
                meta = {"REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": port, "SERVER_PORT": str(server_port)}
                assert not is_same_user_on_loopback(RequestFactory().get("/jobs", **meta))
        finally:
            client.kill()
            client.wait()
