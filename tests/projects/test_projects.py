"""The rules of projects.permissions, one at a time (the route matrix covers every route)."""

from __future__ import annotations

import pytest
from clients import token_for
from factories import make_job
from rest_framework.test import APIClient
from torchyard_server.jobs.models import Job
from torchyard_server.projects.models import Membership, Project

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def test_a_new_user_joins_the_default_project_and_staff_as_its_admin(teammate, staff):
    # Both made as any new user is (tests/conftest.py): the memberships are the projects app's doing.
    assert Membership.objects.get(user=teammate, project__name="default").role == "member"
    assert Membership.objects.get(user=staff, project__name="default").role == "admin"
    assert client_for(teammate).get("/api/auth/me").json()["projects"] == ["default"]


def test_a_member_stops_and_deletes_their_own_job_but_not_a_teammates(teammate, owner):
    own = make_job(name="own", owner=teammate, status=Job.Status.COMPLETED)
    theirs = make_job(name="theirs", owner=owner, status=Job.Status.COMPLETED)
    client = client_for(teammate)
    assert client.get(f"/api/jobs/{theirs.pk}").status_code == 200
    assert client.delete(f"/api/jobs/{theirs.pk}").status_code == 403
    assert client.delete(f"/api/jobs/{own.pk}").status_code == 204


def test_jobs_of_other_projects_are_not_listed_and_answer_404(teammate, owner):
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=owner, role="admin")
    hidden = make_job(name="hidden", owner=owner, project=lab)
    seen = make_job(name="seen", owner=owner)
    client = client_for(teammate)
    assert [j["id"] for j in client.get("/api/jobs").json()] == [seen.pk]
    assert client.get(f"/api/jobs/{hidden.pk}/logs").status_code == 404
    assert client_for(owner).get("/api/jobs?project=lab").json()[0]["project"] == "lab"


def test_a_user_in_no_project_sees_no_job_and_may_submit_none(owner, outsider):
    alices = make_job(name="alices", owner=owner)
    stranger = client_for(outsider)
    assert stranger.get("/api/jobs").json() == []
    assert stranger.get(f"/api/jobs/{alices.pk}").status_code == 404
    refused = stranger.post("/api/jobs", {"name": "mine", "entrypoint": "examples/mlp_ddp.py"}, format="json")
    assert refused.status_code == 400 and "project" in refused.json(), refused.json()


def test_a_project_admin_manages_members_and_a_member_cannot(owner, teammate, outsider):
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=owner, role="admin")
    Membership.objects.create(project=lab, user=teammate, role="member")
    members = "/api/projects/lab/members"
    assert client_for(teammate).post(members, {"username": "carol"}, format="json").status_code == 403
    admin = client_for(owner)
    assert admin.post(members, {"username": "carol", "role": "viewer"}, format="json").status_code == 201
    assert admin.patch(f"{members}/carol", {"role": "member"}, format="json").json()["role"] == "member"
    assert admin.delete(f"{members}/carol").status_code == 204
    assert admin.post("/api/projects", {"name": "x"}, format="json").status_code == 403


def test_a_viewer_may_not_submit_into_the_project(viewer, two_machines):
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=viewer, role="viewer")
    spec = {"name": "m", "project": "lab", "entrypoint": "examples/mlp_ddp.py", "distributed": {"backend": "gloo"}}
    response = client_for(viewer).post("/api/jobs", spec, format="json")
    assert response.status_code == 403 and "not a member of project 'lab'" in response.json()["detail"]
    assert client_for(viewer).post("/api/jobs", {**spec, "project": "nope"}, format="json").status_code == 400
