import pytest

pytestmark = pytest.mark.django_db

PROTECTED = [
    "/api/machines", "/api/jobs", "/api/jobs/1", "/api/jobs/1/logs", "/api/jobs/1/events", "/api/jobs/1/checkpoints",
    "/api/auth/me", "/api/auth/tokens", "/api/schema/", "/api/docs/", "/api/network/machines", "/api/network/status",
    "/api/tasks/distributed/suggest_machines", "/api/agent/config",
]


def test_production_stores_passwords_with_pbkdf2_and_a_million_iterations(settings, django_user_model):
    # The test process hashes with MD5 (tests/conftest.py); the server's own settings keep Django's.
    from django.conf import global_settings
    from torchyard_server import settings as production

    assert not hasattr(production, "PASSWORD_HASHERS")
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    user = django_user_model.objects.create_user("paula", password="pw-paula")
    assert user.password.startswith("pbkdf2_sha256$1000000$")
    assert user.check_password("pw-paula") and not user.check_password("pw-pauline")


def test_health_answers_anonymously(anonymous):
    response = anonymous.get("/api/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize("path", PROTECTED)
def test_it_refuses_anonymous_requests(anonymous, path):
    assert anonymous.get(path).status_code == 401


def test_it_refuses_an_anonymous_job_submission(anonymous):
    response = anonymous.post("/api/jobs", {"name": "x"}, format="json")
    assert response.status_code == 401


def test_a_token_is_issued_for_correct_credentials_only(anonymous, owner):
    wrong = anonymous.post("/api/auth/token", {"username": "alice", "password": "nope"}, format="json")
    assert wrong.status_code == 400
    right = anonymous.post("/api/auth/token", {"username": "alice", "password": "pw-alice"}, format="json")
    assert right.status_code == 200
    token = right.json()["token"]
    anonymous.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert anonymous.get("/api/auth/me").json()["username"] == "alice"


def test_session_login_needs_the_csrf_token(owner):
    from rest_framework.test import APIClient

    browser = APIClient(enforce_csrf_checks=True)
    refused = browser.post("/api/auth/login", {"username": "alice", "password": "pw-alice"}, format="json")
    assert refused.status_code == 403
    csrf = browser.get("/api/auth/csrf").json()["csrftoken"]
    login = browser.post("/api/auth/login", {"username": "alice", "password": "pw-alice"}, format="json",
                         HTTP_X_CSRFTOKEN=csrf)
    assert login.status_code == 200
    assert browser.get("/api/auth/me").status_code == 200
    # Once logged in, an unsafe request without the token is refused.
    assert browser.post("/api/jobs", {}, format="json").status_code == 403
    ok = browser.post("/api/jobs", {}, format="json", HTTP_X_CSRFTOKEN=browser.cookies["csrftoken"].value)
    assert ok.status_code == 400


def test_the_login_page_and_dashboard_routes_answer_anonymously(anonymous, settings, tmp_path):
    # The single-page app shows its own login page; data needs a session.
    (tmp_path / "index.html").write_text("<div id=root></div>")
    settings.FRONTEND_DIST = tmp_path
    for route in ("/login", "/jobs/12", "/machines"):
        page = anonymous.get(route, HTTP_ACCEPT="text/html")
        assert page.status_code == 200 and page.content == b"<div id=root></div>", route
    # A server whose dashboard was never built says how to build it.
    settings.FRONTEND_DIST = tmp_path / "missing"
    unbuilt = anonymous.get("/login")
    assert unbuilt.status_code == 503 and b"The dashboard is not built: run <code>make run</code>" in unbuilt.content
