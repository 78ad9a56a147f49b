"""A job's secret_env on its node: the ranks get the values, nothing the node publishes shows them."""

from __future__ import annotations

import hashlib
import json
import stat
import time

import pytest
from supervisor_support import final_states, has_final_state
from torchyard import protocol
from torchyard.agent import runs
from torchyard.node.proctree import sweep_job_processes
from torchyard.supervisor.argv import build_env
from torchyard.supervisor.output_pump import secret_masker

pytestmark = pytest.mark.timeout(90)

SECRET = "wandb-s3cr3t-0123456789abcdef"
MULTI = "line-one-abc123\nline-two-def456"

PRINTS_SECRETS = """
import hashlib, os, sys
secret = os.environ["WANDB_API_KEY"]
print(f"the key is {secret}!", flush=True)
print(f"digest {hashlib.sha256(secret.encode()).hexdigest()}", flush=True)
print(f"key on stderr: {secret}", file=sys.stderr, flush=True)
print(os.environ["MULTI"], file=sys.stderr, flush=True)
sys.exit(3)
"""


def test_the_masker_hides_every_value_each_line_of_one_and_the_longest_first():
    mask = secret_masker({"A": "abc", "B": "abcdef", "C": MULTI, "D": "  padded  "})
    assert mask("x abcdef y abc z") == "x *** y *** z"
    assert mask("line-one-abc123 then line-two-def456") == "*** then ***"
    assert mask("[padded]") == "[***]"
    assert mask("nothing secret") == "nothing secret"
    assert secret_masker({})("abc") == "abc"
    assert secret_masker({"BLANK": " "})("a b") == "a b"


def test_build_env_gives_the_ranks_secrets_and_torchyards_own_variables_still_win(job_launch, tmp_path):
    launch = job_launch(env={"PLAIN": "1"}, secret_env={"WANDB_API_KEY": SECRET, protocol.ENV_JOB_ID: "999"})
    env = build_env(launch, tmp_path, {})
    assert env["PLAIN"] == "1" and env["WANDB_API_KEY"] == SECRET
    assert env[protocol.ENV_JOB_ID] == str(launch.job_id)
    assert SECRET not in repr(launch)


def test_a_script_that_prints_its_secrets_publishes_only_stars(supervisors, job_launch, code_root):
    (code_root / "scripts" / "prints_secrets.py").write_text(PRINTS_SECRETS)
    launch = job_launch(entrypoint="scripts/prints_secrets.py",
                         secret_env={"WANDB_API_KEY": SECRET, "MULTI": MULTI})
    proc, run_dir = supervisors.start(launch)
    supervisors.wait_for(launch.job_id, has_final_state(0), timeout=40)
    proc.wait(timeout=20)
    events = supervisors.events(launch.job_id)

    published = json.dumps(events)
    for value in (SECRET, *MULTI.splitlines()):
        assert value not in published
        assert value not in (run_dir / "result.json").read_text()
        assert value not in (run_dir / "supervisor.log").read_text()
    lines = [e["line"] for e in events if e["type"] == protocol.LOG and e.get("source") == "worker"]
    assert "the key is ***!" in lines
    assert "key on stderr: ***" in lines
    assert lines.count("***") == 2  # the multi-line secret, line by line
    # The rank itself saw the real value.
    assert f"digest {hashlib.sha256(SECRET.encode()).hexdigest()}" in lines
    [failed] = final_states(events, 0)
    assert failed["status"] == "failed"
    assert {"rank": 0, "stream": "stderr", "line": "key on stderr: ***"} in failed["last_lines"]


def test_the_agent_writes_launch_json_for_its_user_alone(job_launch, tmp_path, code_root, monkeypatch):
    monkeypatch.setenv("TORCHYARD_CODE_ROOT", str(code_root))
    launch = job_launch(entrypoint="scripts/missing.py", redis_url="", secret_env={"WANDB_API_KEY": SECRET})
    work_dir = tmp_path / "agent"
    try:
        started = runs.launch_node(work_dir, launch, publish=lambda event: None)
        assert started["started"] is True
        directory = runs.run_dir(work_dir, launch.job_id, launch.attempt, launch.node_rank)
        assert stat.S_IMODE((directory / "launch.json").stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        deadline = time.monotonic() + 30
        while not (directory / "result.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (directory / "result.json").exists()
        for name in ("result.json", "supervisor.log"):
            assert SECRET not in (directory / name).read_text()
    finally:
        sweep_job_processes(launch.job_id)
