"""GET /api/jobs/{id}/ray/{path}: the Ray dashboard of a live Ray job, proxied to the head's own
address for whoever may see the job; 404 for anyone else, for a job that is not a live Ray job."""

from __future__ import annotations

import http.server
import threading

import pytest
from clients import signed_in
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project

pytestmark = pytest.mark.django_db


class Dashboard(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = f'{{"path": "{self.path}"}}'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "x=1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def dashboard():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def ray_job(owner, port, *, status=Job.Status.RUNNING, framework="ray"):
    project = Project.objects.create(name="secret-ray")
    Membership.objects.create(project=project, user=owner)
    job = Job.objects.create(name="r", owner=owner, project=project, status=status, attempt=1, world_size=2,
                             spec={"framework": framework, "distributed": {"launcher": "ray"}})
    JobNode.objects.create(job=job, attempt=1, machine_name="a", host="127.0.0.1", node_rank=0, nproc=1,
                           rank_start=0, rank_end=0, status=JobNode.Status.RUNNING,
                           progress={"ray": {"head": True, "dashboard_port": port}})
    return job


def test_a_member_reads_the_dashboard_through_torchyard_and_an_outsider_gets_404(api, owner, teammate, dashboard):
    job = ray_job(owner, dashboard)
    answer = api.get(f"/api/jobs/{job.pk}/ray/api/version?a=1&a=2")
    assert answer.status_code == 200
    assert b"".join(answer.streaming_content) == b'{"path": "/api/version?a=1&a=2"}'
    assert answer["Content-Type"] == "application/json" and "Set-Cookie" not in answer
    assert signed_in(teammate).get(f"/api/jobs/{job.pk}/ray/api/version").status_code == 404


@pytest.mark.parametrize("status,framework", [(Job.Status.COMPLETED, "ray"), (Job.Status.RUNNING, "pytorch")])
def test_no_dashboard_for_a_finished_job_or_one_that_is_not_ray(api, owner, dashboard, status, framework):
    job = ray_job(owner, dashboard, status=status, framework=framework)
    assert api.get(f"/api/jobs/{job.pk}/ray/").status_code == 404
