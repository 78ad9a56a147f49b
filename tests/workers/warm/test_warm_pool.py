"""The warm pool (torchyard.warm) on its own: a real fork server of the training Python that imported
torch, and the real launcher forking gloo ranks from it. Each safety promise is checked from inside
a rank: no thread, descriptor, socket or CUDA context of the server; a fresh process per rank; the
rank's own command line and identity in /proc; and the launcher's death ends its ranks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from torchyard.warm import pools, zygote
from torchyard.warm.proctitle import room_arg, room_env

WORKERS = Path(__file__).resolve().parents[3] / "workers"

PROBE = """\
import json, os, sys, threading
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
sockets = [fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")]
import torch
import torch.distributed as dist
report = {"threads": len(os.listdir("/proc/self/task")), "fds": fds, "sockets": sockets, "pid": os.getpid(),
          "ppid": os.getppid(), "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "umask": os.umask(0),
          "cuda": torch.cuda.is_initialized(), "path0": sys.path[0], "rank": os.environ["RANK"],
          "sid": os.getsid(0) == os.getpid(), "torchyard_loaded": "torchyard" in sys.modules}
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
report["sum"] = total.item()
dist.destroy_process_group()
print("PROBE " + json.dumps(report), flush=True)
if "--hold" in sys.argv:
    import time
    time.sleep(60)
if "--fail" in sys.argv and os.environ["RANK"] == "1":
    raise SystemExit(7)
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    path = folder / "pool.sock"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(WORKERS)} | room_env()
    with open(folder / "pool.log", "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "torchyard.warm.zygote", str(path), room_arg()], env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while (hello := pools.hello(path)) is None:
        assert server.poll() is None and time.monotonic() < deadline, (folder / "pool.log").read_text()
        time.sleep(0.2)
    try:
        yield server, path, hello
    finally:
        server.kill()
        server.wait()


def launch(pool, tmp_path: Path, *args: str, nproc: int = 2, port: int = 0, script_text: str = PROBE,
           **plan_extra: object) -> tuple[subprocess.Popen, Path]:
    _, path, _ = pool
    script = tmp_path / "probe.py"
    script.write_text(script_text)
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    plan = {"socket": str(path), "nproc": nproc, "rank_start": 0, "world_size": nproc, "nnodes": 1, "node_rank": 0,
            "master_addr": "127.0.0.1", "master_port": port, "run_id": "t", "log_dir": str(tmp_path / "logs"),
            "argv": [str(script), *args], "module": "", "binary": sys.executable, **plan_extra}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=str(WORKERS), TORCHYARD_JOB_ID="4242")
    with open(tmp_path / "launcher.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "torchyard.warm.run", str(tmp_path / "plan.json")], env=env,
                                cwd=str(tmp_path), stderr=log)
    return proc, tmp_path / "logs" / "attempt_0"


def reports(logs: Path, nproc: int = 2) -> list[dict]:
    found = []
    for rank in range(nproc):
        lines = [line for line in (logs / str(rank) / "stdout.log").read_text().splitlines() if line.startswith("PROBE ")]
        assert lines, (logs / str(rank) / "stderr.log").read_text()
        found.append(json.loads(lines[0][len("PROBE "):]))
    return found


def test_the_pool_imported_torch_with_one_thread_and_no_cuda(pool):
    _, _, hello = pool
    assert hello["threads"] == 1 and hello["cuda_initialized"] is False
    assert hello["python"] == sys.executable and "torch" in hello["versions"]


def test_ranks_are_fresh_processes_of_the_pool_with_nothing_of_it_and_torchruns_contract(pool, tmp_path):
    server, path, _ = pool
    before = pools.hello(path)["forks"]
    proc, logs = launch(pool, tmp_path)
    assert proc.wait(timeout=60) == 0, (tmp_path / "launcher.log").read_text()
    ranks = reports(logs)
    assert [r["sum"] for r in ranks] == [1.0, 1.0]  # a real gloo all-reduce between the two
    umask = os.umask(0)
    os.umask(umask)
    assert {r["ppid"] for r in ranks} == {server.pid} and len({r["pid"] for r in ranks}) == 2
    assert pools.hello(path)["forks"] == before + 2  # one fork per rank, the server itself runs nothing
    for rank in ranks:
        assert rank["threads"] == 1 and rank["sockets"] == [] and rank["cuda"] is False
        assert rank["fds"] in ([0, 1, 2], [0, 1, 2, 3])  # 3: the listing of /proc/self/fd itself
        assert rank["name"] == "__main__" and rank["argv"] == [str(tmp_path / "probe.py")]
        assert rank["cwd"] == str(tmp_path) and rank["path0"] == str(tmp_path) and rank["sid"]
        assert rank["torchyard_loaded"] is False  # the server's copy of the package is not the rank's
        assert rank["umask"] == umask


def test_a_rank_shows_its_own_command_line_and_identity_in_proc(pool, tmp_path):
    proc, logs = launch(pool, tmp_path, "--hold")
    try:
        deadline = time.monotonic() + 60
        while not (logs / "1" / "stdout.log").exists() or "PROBE" not in (logs / "1" / "stdout.log").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        for rank in reports(logs):
            seen = psutil.Process(rank["pid"])
            assert seen.cmdline()[:3] == [sys.executable, "-u", str(tmp_path / "probe.py")]
            environ = seen.environ()
            assert environ["TORCHYARD_JOB_ID"] == "4242" and environ["RANK"] == rank["rank"]
            assert not any(name.startswith("TORCHYARD_WARM_ROOM") for name in environ)
    finally:
        proc.kill()  # the launcher dies: the pool ends its ranks
        proc.wait()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(r["pid"]) and psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE
              for r in reports(logs)):
        assert time.monotonic() < deadline, "a rank outlived its launcher"
        time.sleep(0.1)


def test_the_first_failure_is_named_as_torchrun_names_it_and_the_others_are_stopped(pool, tmp_path):
    proc, logs = launch(pool, tmp_path, "--fail")
    assert proc.wait(timeout=60) == 1
    said = (tmp_path / "launcher.log").read_text()
    assert "failed (exitcode: 7) local_rank: 1 (pid: " in said, said


def test_a_stop_reaches_every_rank_and_the_pool_serves_on(pool, tmp_path):
    proc, logs = launch(pool, tmp_path, "--hold")
    deadline = time.monotonic() + 60
    while not all((logs / str(r) / "stdout.log").exists() and "PROBE" in (logs / str(r) / "stdout.log").read_text()
                  for r in range(2)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert pools.hello(pool[1]) is not None


def test_bad_requests_are_refused_without_harming_the_pool(pool):
    _, path, _ = pool
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(path))
        conn.sendall(b'{"op": "spawn", "argv": "rm -rf /", "env": {}}\n')
        assert b"argv must be a non-empty list" in conn.recv(4096)
    assert pools.hello(path) is not None


def test_an_environment_read_at_import_sends_the_rank_cold():
    assert pools.cold_reason({"TORCH_SHOW_CPP_STACKTRACES": "1"}, {}) != ""
    assert pools.cold_reason({"PYTHONPATH": "/x", "OMP_NUM_THREADS": "4", "RANK": "0"}, {"OMP_NUM_THREADS": "1"}) == ""


PLAIN_DDP = Path(__file__).resolve().parents[2] / "integration" / "job_exits" / "plain_ddp.py"


def test_a_plain_ddp_script_forked_as_two_nodes_of_two_ends_every_time(pool, tmp_path):
    # Without rank_main's hold on the process groups, 8 of 12 such runs deadlocked in torch's
    # teardown (torchyard/rank_main.py): ten in a row all ending is what a user needs.
    _, path, _ = pool
    env = dict(os.environ, PYTHONPATH=str(WORKERS), TORCHYARD_JOB_ID="4243")
    for run in range(10):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        launchers = []
        for node in (0, 1):
            folder = tmp_path / f"run{run}" / f"node{node}"
            folder.mkdir(parents=True)
            plan = {"socket": str(path), "nproc": 2, "rank_start": 2 * node, "world_size": 4, "nnodes": 2,
                    "node_rank": node, "master_addr": "127.0.0.1", "master_port": port, "run_id": f"plain{run}",
                    "log_dir": str(folder / "logs"), "argv": [str(PLAIN_DDP)], "module": "", "binary": sys.executable}
            (folder / "plan.json").write_text(json.dumps(plan))
            launchers.append(subprocess.Popen([sys.executable, "-m", "torchyard.warm.run", str(folder / "plan.json")],
                                              env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        codes = []
        for launcher in launchers:
            try:
                codes.append(launcher.wait(timeout=60))
            except subprocess.TimeoutExpired:
                codes.append(None)
                launcher.send_signal(signal.SIGTERM)  # its ranks' groups get it (then SIGKILL after the grace)
                launcher.wait()
        assert codes == [0, 0], f"run {run}: launchers ended {codes} (None: a rank never ended)"


def test_a_pool_whose_agent_died_before_it_started_serves_nothing(tmp_path):
    """The agent names itself (zygote.AGENT_PID_ENV): a pool whose agent was killed before the pool's
    first line ran is init's child already, and must not take init for its agent and serve forever."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(WORKERS)} | room_env()
    env[zygote.AGENT_PID_ENV] = str(gone.pid)
    server = subprocess.run([sys.executable, "-m", "torchyard.warm.zygote", str(tmp_path / "pool.sock"), room_arg()],
                            env=env, capture_output=True, text=True, timeout=120)
    assert server.returncode == 0, server.stdout + server.stderr
    assert not (tmp_path / "pool.sock").exists()


# fault_tolerance.mode in_place: rank 1 dies (exit 3) unless it is a replacement; rank 0 waits for the
# replacement's word, so it is alive throughout. `--always` makes every rank 1 die.
DIES_ONCE = """\
import os, sys, time
from pathlib import Path
word = Path("replaced.txt")
if os.environ["RANK"] == "1":
    if "--yield" in sys.argv:
        raise SystemExit(83)  # yielded for a preemption (protocol.YIELD_EXIT_CODE)
    if "--always" in sys.argv or not os.environ.get("TORCHYARD_FT_REPLACEMENT"):
        raise SystemExit(3)
    word.write_text(os.environ["TORCHYARD_FT_REPLACEMENT"] + " " + os.environ["TORCHYARD_FT_LIGHTHOUSE"])
    raise SystemExit(0)
deadline = time.monotonic() + 60
while not word.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
import socket  # the lighthouse listens on the job's master port once it is up
while time.monotonic() < deadline:
    try:
        socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
print("RANK0", os.getpid(), flush=True)
"""


def test_in_place_a_dead_rank_is_replaced_alone_and_node_0_runs_the_lighthouse(pool, tmp_path):
    proc, logs = launch(pool, tmp_path, script_text=DIES_ONCE, in_place=True, replacements=2)
    assert proc.wait(timeout=60) == 0, (tmp_path / "launcher.log").read_text()
    said = (tmp_path / "launcher.log").read_text()
    first = json.loads((logs.parent / "pids.json").read_text())
    assert "failed (exitcode" not in said and "closing signal" not in said, said  # the lighthouse's end is no failure
    assert f"replaced in place by pid {first['1']}, the others kept running (replacement 1)" in said, said
    # Rank 0 was never replaced: the pid the launcher first named printed the word.
    assert f"local rank 0 pid {first['0']}" in said and f"RANK0 {first['0']}" in (logs / "0" / "stdout.log").read_text()
    number, lighthouse = (tmp_path / "replaced.txt").read_text().split()
    assert number == "1" and lighthouse.startswith("http://127.0.0.1:")
    assert "in_place lighthouse for 2 ranks" in (logs / "lighthouse" / "stderr.log").read_text()
    pid = int(said.split("the in_place lighthouse pid ")[1].split()[0])
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the lighthouse outlived its launcher"
        time.sleep(0.1)


def test_in_place_spent_replacements_fall_back_to_stopping_the_node(pool, tmp_path):
    proc, _ = launch(pool, tmp_path, "--always", script_text=DIES_ONCE, in_place=True, replacements=1)
    assert proc.wait(timeout=90) == 1
    said = (tmp_path / "launcher.log").read_text()
    assert "(replacement 1)" in said and "its in-place replacements are spent (1 of" in said, said
    assert "failed (exitcode: 3) local_rank: 1" in said, said


def test_in_place_a_rank_that_yielded_for_a_preemption_is_not_replaced(pool, tmp_path):
    from torchyard import protocol
    from torchyard.warm import run

    assert run.YIELD_EXIT_CODE == protocol.YIELD_EXIT_CODE
    proc, _ = launch(pool, tmp_path, "--yield", script_text=DIES_ONCE, in_place=True, replacements=2)
    assert proc.wait(timeout=60) == 1
    said = (tmp_path / "launcher.log").read_text()
    assert "replaced in place" not in said and "failed (exitcode: 83) local_rank: 1" in said, said
