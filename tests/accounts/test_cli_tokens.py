"""`torchyard login` and `torchyard token create|list|revoke` against a real server (Django's live
server over this test's database): what they print, and the errors a user reads."""

from __future__ import annotations

import socket

import pytest
from torchyard import cli
from torchyard_server.accounts.models import ApiToken


@pytest.fixture
def server(live_server, django_user_model, monkeypatch):
    django_user_model.objects.create_user("erin", password="pw-erin")
    monkeypatch.setenv("TORCHYARD_SERVER", live_server.url)
    monkeypatch.delenv("TORCHYARD_TOKEN", raising=False)
    return live_server.url


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_login_prints_a_new_token_named_for_this_host(server, capsys, monkeypatch):
    monkeypatch.setenv("TORCHYARD_PASSWORD", "pw-erin")
    code, out, err = run(capsys, "login", "--username", "erin")
    assert code == 0
    token = out.strip()
    assert "\n" not in token and len(token) == 64  # stdout is the token alone: $(torchyard login)
    assert f"'cli on {socket.gethostname()}'" in err and "expires never" in err
    assert ApiToken.objects.get(user__username="erin").name == f"cli on {socket.gethostname()}"


def test_login_with_a_wrong_password_says_so(server, capsys, monkeypatch):
    monkeypatch.setenv("TORCHYARD_PASSWORD", "nope")
    code, out, err = run(capsys, "login", "--username", "erin")
    assert code == 2 and out == ""
    assert "HTTP 400" in err and "wrong username or password" in err


def test_tokens_are_created_listed_and_revoked(server, capsys, monkeypatch):
    monkeypatch.setenv("TORCHYARD_PASSWORD", "pw-erin")
    _, out, _ = run(capsys, "login", "--username", "erin", "--name", "first")
    monkeypatch.setenv("TORCHYARD_TOKEN", out.strip())

    code, out, err = run(capsys, "token", "create", "laptop", "--expires-days", "30")
    assert code == 0 and "'laptop'" in err and "expires never" not in err
    laptop = out.strip()

    code, out, _ = run(capsys, "token", "list")
    assert code == 0 and "first" in out and "laptop" in out and len(out.splitlines()) == 3
    assert laptop not in out and laptop[:8] in out  # the start only, never the token

    laptop_id = ApiToken.objects.get(name="laptop").pk
    code, out, _ = run(capsys, "token", "revoke", str(laptop_id))
    assert code == 0 and f"API token {laptop_id} revoked" in out
    monkeypatch.setenv("TORCHYARD_TOKEN", laptop)
    code, _, err = run(capsys, "token", "list")
    assert code == 2 and "HTTP 401" in err


def test_token_commands_explain_their_errors(server, capsys, monkeypatch):
    code, _, err = run(capsys, "token", "list")
    assert code == 2 and "no API token" in err and "torchyard login" in err

    monkeypatch.setenv("TORCHYARD_PASSWORD", "pw-erin")
    _, out, _ = run(capsys, "login", "--username", "erin")
    monkeypatch.setenv("TORCHYARD_TOKEN", out.strip())
    code, _, err = run(capsys, "token", "revoke", "999999")
    assert code == 2 and "HTTP 404" in err and "no API token with this id" in err
    code, _, err = run(capsys, "token", "create", "soon", "--expires-days", "0")
    assert code == 2 and "HTTP 400" in err and "expires_in_days" in err
