"""`torchyard run` / `submit` / `artifacts` without a real server: argument parsing, spec files,
the pack-probe-upload-submit flow against a small fake of the HTTP API, and artifact downloads
(paths that would leave the output folder are refused, hashes are checked)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from torchyard import cli
from torchyard.client import CliError
from torchyard.client.artifacts import artifact_destination, download_artifacts
from torchyard.client.http import ApiClient
from torchyard.client.specfile import entrypoint_in, load_spec_file, parse_env, run_spec, secret_env_from


# --- a fake of the server's HTTP API ------------------------------------------------------------
class FakeApi:
    """The routes the CLI uses, in memory; `requests` records (method, path, headers, body)."""

    def __init__(self) -> None:
        self.max_bytes = 10 << 20
        self.bundles: dict[str, bytes] = {}
        self.submitted: list[dict[str, Any]] = []
        self.submit_answer: tuple[int, Any] | None = None  # overrides the 201 of POST /api/jobs
        self.artifacts: list[dict[str, Any]] = []
        self.artifact_bodies: dict[int, bytes] = {}
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if path == "/api/bundles/limits" and method == "GET":
            return 200, {"max_bytes": self.max_bytes}
        if path.startswith("/api/bundles/"):
            sha = path.partition("?")[0].rsplit("/", 1)[1]  # a PUT says its kind: ?kind=code
            if method == "HEAD":
                return (200, None) if sha in self.bundles else (404, None)
            if method == "PUT":
                if hashlib.sha256(body).hexdigest() != sha:
                    return 400, {"bundle": ["the body's sha256 is not the one in the URL."]}
                self.bundles[sha] = body
                return 201, {"sha256": sha, "size": len(body)}
        if path == "/api/jobs" and method == "POST":
            spec = json.loads(body)
            self.submitted.append(spec)
            if self.submit_answer is not None:
                return self.submit_answer
            return 201, {"id": len(self.submitted), "name": spec["name"], "status": "queued", "progress": {}}
        if path.endswith("/artifacts") and method == "GET":
            return 200, self.artifacts
        if "/artifacts/" in path and method == "GET":
            return 200, self.artifact_bodies[int(path.rsplit("/", 1)[1])]
        return 404, {"detail": "Not found."}


@pytest.fixture
def fake_api() -> Iterator[tuple[FakeApi, str]]:
    api = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.requests.append((self.command, self.path, dict(self.headers), body))
            status, payload = api.answer(self.command, self.path, body)
            raw = payload if isinstance(payload, bytes) else (json.dumps(payload).encode() if payload is not None else b"")
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

        do_GET = do_HEAD = do_PUT = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "myproject"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "train.py").write_text("print('module')\n")
    (root / "requirements.txt").write_text("einops\n")
    return root


def run_cli(server: str, *argv: str) -> int:
    return cli.main([*argv[:1], "--server", server, "--api-token", "tok", *argv[1:]])


# --- parsing `run` ------------------------------------------------------------------------------
def parse(*argv: str):
    return cli.build_parser().parse_args(["run", *argv])


def test_run_keeps_everything_after_the_script_verbatim_even_flags_of_its_own():
    args = parse("--nnodes", "2", "--nproc-per-node", "2", "train.py", "--lr", "0.1", "--nnodes", "3", "-m", "--detach")
    assert (args.nnodes, args.nproc_per_node, args.module, args.detach) == (2, 2, False, False)
    assert args.argv == ["train.py", "--lr", "0.1", "--nnodes", "3", "-m", "--detach"]


def test_run_accepts_torchruns_flag_spellings():
    assert parse("--nproc_per_node", "4", "t.py").nproc_per_node == 4
    assert parse("--nproc_per_node=3", "t.py").nproc_per_node == 3
    assert parse("--nproc-per-node=5", "t.py").nproc_per_node == 5
    assert parse("--max_restarts", "1", "t.py").max_restarts == 1
    assert parse("--max-restarts", "2", "--gpus_per_node", "1", "t.py").gpus_per_node == 1


def test_run_with_module_takes_the_module_as_the_target():
    args = parse("-m", "pkg.train", "--x", "1")
    assert args.module and args.argv == ["pkg.train", "--x", "1"]
    assert parse("--module", "pkg.train").argv == ["pkg.train"]


def test_run_keeps_a_separator_after_the_script_and_repeats_env_and_pip():
    args = parse("--env", "A=1", "--env", "B=x=y", "--pip", "einops", "--pip", "rich==13", "t.py", "--", "--x")
    assert args.argv == ["t.py", "--", "--x"]
    assert parse_env(args.env) == {"A": "1", "B": "x=y"}
    assert args.pip == ["einops", "rich==13"]


def test_env_without_equals_is_a_readable_error():
    with pytest.raises(CliError, match="--env FOO: expected KEY=VALUE"):
        parse_env(["FOO"])


def test_secret_env_takes_names_and_reads_values_from_the_environment():
    assert parse("--secret-env", "TOKEN", "--secret-env", "KEY", "t.py").secret_env == ["TOKEN", "KEY"]
    assert secret_env_from(["TOKEN"], {"TOKEN": "s3cr=t", "OTHER": "x"}) == {"TOKEN": "s3cr=t"}
    # A value on the command line would stay in the shell's history: refused, and not echoed back.
    with pytest.raises(CliError, match=r"--secret-env TOKEN=\.\.\.: give only the name") as refused:
        secret_env_from(["TOKEN=hunter2"], {})
    assert "hunter2" not in str(refused.value)
    with pytest.raises(CliError, match="--secret-env MISSING: MISSING is not set in your environment"):
        secret_env_from(["MISSING"], {})


def test_run_spec_names_the_job_after_the_script_and_the_directory(project: Path):
    spec = run_spec(target="train.py", module=False, args=["--lr", "0.1"], directory=project, nnodes=2,
                    nproc_per_node=2, gpus_per_node=1, env={"A": "1"}, pip=["einops"], max_restarts=0)
    assert spec == {
        "name": "train.py (myproject)", "entrypoint": "train.py", "args": ["--lr", "0.1"],
        "resources": {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 1}, "env": {"A": "1"},
        "runtime": {"pip": ["einops"]}, "fault_tolerance": {"max_restarts": 0},
    }
    module = run_spec(target="pkg.train", module=True, args=[], directory=project, nnodes=1, nproc_per_node=1,
                      name="mine")
    assert module == {"name": "mine", "module": "pkg.train", "args": [], "resources": {"nodes": 1, "procs_per_node": 1}}


def test_the_script_is_found_from_the_current_directory_or_the_project(project: Path, tmp_path: Path):
    assert entrypoint_in(project, "train.py", project) == "train.py"
    assert entrypoint_in(project, "./pkg/train.py", project) == "pkg/train.py"
    assert entrypoint_in(project, "myproject/pkg/train.py", tmp_path) == "pkg/train.py"
    assert entrypoint_in(project, "pkg/train.py", tmp_path) == "pkg/train.py"
    (tmp_path / "outside.py").write_text("")
    with pytest.raises(CliError, match="outside.py: no such file in the project directory"):
        entrypoint_in(project, "outside.py", tmp_path)
    with pytest.raises(CliError, match="missing.py: no such file"):
        entrypoint_in(project, "missing.py", project)


# --- the whole `run` flow against the fake API --------------------------------------------------
def test_run_packs_uploads_once_and_submits_the_spec(fake_api, project, monkeypatch, capsys):
    api, server = fake_api
    monkeypatch.chdir(project)
    code = run_cli(server, "run", "--nnodes", "2", "--nproc_per_node", "2", "--env", "SEED=1", "--pip", "rich",
                   "--detach", "train.py", "--lr", "0.1", "--detach")
    out = capsys.readouterr().out
    assert code == 0, out
    (sha,) = api.bundles
    put = next(r for r in api.requests if r[0] == "PUT")
    assert put[1] == f"/api/bundles/{sha}?kind=code"
    assert put[2]["Content-Type"] == "application/octet-stream" and put[2]["Authorization"] == "Token tok"
    assert int(put[2]["Content-Length"]) == len(put[3])
    assert "uploaded code bundle" in out and "torchyard logs 1 --follow" in out
    spec = api.submitted[0]
    assert spec["code"] == {"bundle": sha} and spec["entrypoint"] == "train.py"
    assert spec["args"] == ["--lr", "0.1", "--detach"]
    assert spec["resources"] == {"nodes": 2, "procs_per_node": 2}
    assert spec["env"] == {"SEED": "1"} and spec["runtime"] == {"pip": ["rich"]}
    assert "secret_env" not in spec and "project" not in spec

    # Unchanged code: the server is asked, and nothing is uploaded again.
    assert run_cli(server, "run", "--detach", "-m", "pkg.train", "--x", "1") == 0
    out = capsys.readouterr().out
    assert f"code unchanged: bundle {sha[:8]}… already on the server" in out
    assert sum(1 for r in api.requests if r[0] == "PUT") == 1
    assert api.submitted[1]["module"] == "pkg.train" and api.submitted[1]["args"] == ["--x", "1"]
    assert api.submitted[1]["code"] == {"bundle": sha}

    # Kubetorch's `kt run python train.py` spelling: the interpreter named is not the script.
    assert run_cli(server, "run", "--detach", "python", "train.py", "--lr", "0.2") == 0
    assert run_cli(server, "run", "--detach", "python3", "-m", "pkg.train") == 0
    assert (api.submitted[2]["entrypoint"], api.submitted[2]["args"]) == ("train.py", ["--lr", "0.2"])
    assert api.submitted[3]["module"] == "pkg.train"


def test_run_sends_secrets_from_the_environment_and_the_project(fake_api, project, monkeypatch, capsys):
    api, server = fake_api
    monkeypatch.chdir(project)
    monkeypatch.setenv("WANDB_API_KEY", "k-123")
    assert run_cli(server, "run", "--secret-env", "WANDB_API_KEY", "--project", "vision", "--detach", "train.py") == 0
    spec = api.submitted[0]
    assert spec["secret_env"] == {"WANDB_API_KEY": "k-123"} and spec["project"] == "vision"
    assert "k-123" not in capsys.readouterr().out


def test_run_refuses_a_script_its_ignore_files_leave_out(fake_api, project, monkeypatch, capsys):
    _, server = fake_api
    (project / ".torchyardignore").write_text("train.py\n")
    monkeypatch.chdir(project)
    assert run_cli(server, "run", "--detach", "train.py") == 2
    err = capsys.readouterr().err
    assert "train.py is left out of the bundle" in err and "Traceback" not in err


def test_a_project_over_the_servers_limit_is_one_readable_error(fake_api, project, monkeypatch, capsys):
    api, server = fake_api
    api.max_bytes = 100
    (project / "data.bin").write_bytes(b"x" * 5000)
    monkeypatch.chdir(project)
    assert run_cli(server, "run", "--detach", "train.py") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.bin" in err and "Traceback" not in err
    assert not api.bundles and not api.submitted


def test_field_errors_of_a_refused_job_are_printed_readably(fake_api, project, monkeypatch, capsys):
    api, server = fake_api
    api.submit_answer = (400, {"resources": {"nodes": ["Ensure this value is greater than or equal to 1."]}})
    monkeypatch.chdir(project)
    assert run_cli(server, "run", "--nnodes", "0", "--detach", "train.py") == 2
    err = capsys.readouterr().err
    assert "POST /api/jobs: HTTP 400" in err and "  resources.nodes: Ensure this value" in err


def test_an_unreachable_server_is_one_readable_error(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert run_cli("http://127.0.0.1:9", "run", "train.py") == 2
    err = capsys.readouterr().err
    assert "cannot reach http://127.0.0.1:9" in err and "Traceback" not in err


def test_uploads_stream_the_file_and_report_every_block(fake_api, tmp_path: Path):
    api, server = fake_api
    body = bytes(range(256)) * 1000
    archive = tmp_path / "bundle.tar.zst"
    archive.write_bytes(body)
    sent: list[int] = []
    sha = hashlib.sha256(body).hexdigest()
    answer = ApiClient(server, "tok").put_file(f"/api/bundles/{sha}", archive, sent.append)
    assert answer == {"sha256": sha, "size": len(body)} and api.bundles[sha] == body
    assert sum(sent) == len(body) and len(sent) > 1


def test_the_stream_url_follows_the_servers_scheme_and_prefix():
    assert ApiClient("http://h:8000/", "t").websocket_url("/api/jobs/1/stream?after=5") == \
        "ws://h:8000/api/jobs/1/stream?after=5"
    assert ApiClient("https://h/yard", "t").websocket_url("/api/jobs/1/stream") == "wss://h/yard/api/jobs/1/stream"


# --- spec files ---------------------------------------------------------------------------------
def test_a_yaml_spec_resolves_code_dir_against_its_own_folder(tmp_path: Path, project: Path):
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    path = spec_dir / "job.yaml"
    path.write_text("name: demo\nentrypoint: train.py\ncode:\n  dir: ../myproject\nargs: ['--lr', '0.1']\n")
    loaded = load_spec_file(path)
    assert loaded.code_dir == project.resolve()
    assert loaded.spec == {"name": "demo", "entrypoint": "train.py", "code": {}, "args": ["--lr", "0.1"]}


def test_a_json_spec_and_a_spec_without_code_pass_through(tmp_path: Path):
    path = tmp_path / "spec.json"
    document = {"name": "r", "entrypoint": "examples/mlp_ddp.py", "code": {"bundle": "a" * 64}}
    path.write_text(json.dumps(document))
    loaded = load_spec_file(path)
    assert loaded.spec == document and loaded.code_dir is None
    yaml_json = tmp_path / "spec.yml"
    yaml_json.write_text(json.dumps({"name": "r", "entrypoint": "examples/mlp_ddp.py"}))
    assert load_spec_file(yaml_json).code_dir is None


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "name: x\n  entrypoint: [\n", "bad.yaml: invalid YAML at line"),
    ("bad.json", '{"name": ', "bad.json: invalid JSON"),
    ("list.yaml", "- a\n- b\n", "expected a JobSpec mapping"),
    ("empty.yaml", "", "found nothing"),
    ("nodir.yaml", "name: x\ncode: {dir: missing}\n", "code.dir: "),
    ("both.yaml", "name: x\ncode: {dir: ., bundle: abc}\n", "either dir"),
    ("scalar.yaml", "name: x\ncode: here\n", "code: expected a mapping"),
])
def test_spec_file_errors_are_one_readable_line(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CliError, match=message) as caught:
        load_spec_file(path)
    assert "\n" not in str(caught.value)


def test_submit_of_a_missing_file_names_it_and_exits_2(tmp_path: Path, capsys):
    assert cli.main(["submit", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml: No such file" in err and "Traceback" not in err


def test_submit_uploads_the_code_dir_and_sends_its_bundle(fake_api, project: Path, tmp_path: Path, capsys):
    api, server = fake_api
    path = project / "job.yaml"
    path.write_text("name: demo\nentrypoint: train.py\ncode: {dir: .}\nresources: {nodes: 2}\n")
    assert run_cli(server, "submit", str(path), "--detach") == 0
    (sha,) = api.bundles
    assert api.submitted == [{"name": "demo", "entrypoint": "train.py", "code": {"bundle": sha}, "resources": {"nodes": 2}}]
    assert "#1" in capsys.readouterr().out


def test_submit_accepts_follow_and_refuses_follow_with_detach():
    args = cli.build_parser().parse_args(["submit", "s.json", "--follow"])
    assert args.follow and not args.detach
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["submit", "s.json", "--follow", "--detach"])


# --- artifacts ----------------------------------------------------------------------------------
def artifact(path: str, **extra: Any) -> dict[str, Any]:
    return {"id": 1, "attempt": 0, "node_rank": 1, "path": path, "size": 1, "sha256": "0" * 64, **extra}


def test_artifact_destinations_stay_inside_the_output_folder(tmp_path: Path):
    out = tmp_path / "out"
    assert artifact_destination(out, artifact("model/final.pt")) == out.resolve() / "attempt-0/node-1/model/final.pt"
    for bad in ("../escape", "/etc/passwd", "a/../../b", "a/..", "", ".", "a//b", "x\x00y"):
        with pytest.raises(CliError, match="refused"):
            artifact_destination(out, artifact(bad))


def test_an_artifact_path_through_a_symlink_out_of_the_folder_is_refused(tmp_path: Path):
    out = tmp_path / "out"
    (out / "attempt-0" / "node-1").mkdir(parents=True)
    (out / "attempt-0" / "node-1" / "link").symlink_to(tmp_path)
    with pytest.raises(CliError, match="refused"):
        artifact_destination(out, artifact("link/x.txt"))


def test_artifacts_are_listed_and_downloaded_with_their_hashes_checked(fake_api, tmp_path: Path, capsys):
    api, server = fake_api
    bodies = {1: b"weights", 2: b"metrics [bold]not markup[/bold]"}
    api.artifact_bodies = bodies
    api.artifacts = [
        {"id": 1, "attempt": 0, "node_rank": 0, "path": "model.pt", "size": 7,
         "sha256": hashlib.sha256(bodies[1]).hexdigest()},
        {"id": 2, "attempt": 1, "node_rank": 1, "path": "logs/[run].txt", "size": len(bodies[2]),
         "sha256": hashlib.sha256(bodies[2]).hexdigest()},
    ]
    assert run_cli(server, "artifacts", "7") == 0
    listing = capsys.readouterr().out
    assert "model.pt" in listing and "logs/[run].txt" in listing and "2 artifact(s)" in listing

    out = tmp_path / "out"
    assert run_cli(server, "artifacts", "7", "--out", str(out)) == 0
    assert (out / "attempt-0/node-0/model.pt").read_bytes() == bodies[1]
    assert (out / "attempt-1/node-1/logs/[run].txt").read_bytes() == bodies[2]
    assert "downloaded 2 file(s)" in capsys.readouterr().out
    assert run_cli(server, "artifacts", "7", "--out", str(out)) == 0
    rerun = capsys.readouterr().out
    assert "downloaded 0 file(s)" in rerun and "2 already there" in rerun


def test_a_hash_mismatch_names_the_file_and_leaves_nothing(fake_api, tmp_path: Path):
    api, server = fake_api
    api.artifact_bodies = {3: b"tampered"}
    listed = [{"id": 3, "attempt": 0, "node_rank": 0, "path": "ckpt/last.pt", "size": 8,
               "sha256": hashlib.sha256(b"original").hexdigest()}]
    console = Console(file=io.StringIO(), force_terminal=False)
    with pytest.raises(CliError, match="ckpt/last.pt .*sha256 mismatch"):
        download_artifacts(ApiClient(server, "tok"), 5, listed, tmp_path / "out", console)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
