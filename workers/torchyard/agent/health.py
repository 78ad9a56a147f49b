"""A machine's health check: what its agent runs when the control plane asks, for a quarantined
machine whose probation is over (the control plane releases it on a pass).

Every check runs in the training Python, as a job's ranks would, in one process of its own with a
time limit: the interpreter starts, torch imports, a matrix product computes the right answer (on
every GPU too, where the machine has them), a one-process gloo group forms on the machine's own
address and all-reduces (what a job's rendezvous and collectives need of its network stack), and a
file is written, synced, read back and removed in the agent's work directory. A check that hangs
fails at the limit, and those that answered before it are kept.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import cast

from torchyard import protocol, tls

log = logging.getLogger("torchyard.agent")
TIMEOUT_S = 120.0

# Runs in the training Python: argv[1] is {"address", "gpus", "work_dir"}. One JSON line per check.
CHECKS = r"""
import json, os, socket, sys, time

ask = json.loads(sys.argv[1])


def check(name, run):
    started = time.monotonic()
    try:
        detail, ok = run(), True
    except BaseException as exc:
        detail, ok = f"{type(exc).__name__}: {exc}", False
    print(json.dumps({"name": name, "ok": ok, "detail": str(detail)[:500],
                      "seconds": round(time.monotonic() - started, 3)}), flush=True)
    return ok


def imports():
    global torch
    import torch
    return f"torch {torch.__version__}"


def compute():
    a = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 4096
    got = (a @ torch.eye(64)).sum().item()
    want = a.sum().item()
    if abs(got - want) > 1e-3 * max(1.0, abs(want)):
        raise RuntimeError(f"a matrix product came out {got}, not {want}")
    return "a 64x64 matrix product is right"


def gpus():
    wanted = int(ask["gpus"])
    if not torch.cuda.is_available():
        raise RuntimeError(f"CUDA is not available, {wanted} GPU(s) expected")
    found = torch.cuda.device_count()
    if found < wanted:
        raise RuntimeError(f"{found} GPU(s) visible, {wanted} expected")
    for index in range(found):
        x = torch.ones(256, 256, device=f"cuda:{index}")
        if (x @ x).sum().item() != 256 ** 3:
            raise RuntimeError(f"GPU {index} computed a wrong product")
        torch.cuda.synchronize(index)
    return f"{found} GPU(s) compute"


def collective():
    import torch.distributed as dist
    with socket.socket() as probe:
        probe.bind((ask["address"], 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://{ask['address']}:{port}", rank=0, world_size=1)
    try:
        t = torch.ones(4)
        dist.all_reduce(t)
        if t.tolist() != [1.0] * 4:
            raise RuntimeError(f"all_reduce gave {t.tolist()}")
    finally:
        dist.destroy_process_group()
    return f"a gloo group formed on {ask['address']} and all-reduced"


def disk():
    folder = os.path.join(ask["work_dir"], "health")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"probe-{os.getpid()}")
    data = os.urandom(1 << 20)
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(path, "rb") as f:
            if f.read() != data:
                raise RuntimeError("what was read back differs from what was written")
    finally:
        if os.path.exists(path):
            os.remove(path)
    return f"1 MiB written, synced and read back in {folder}"


if check("torch", imports):
    check("compute", compute)
    if int(ask["gpus"]) > 0:
        check("gpu", gpus)
    check("collective", collective)
check("disk", disk)
"""


def own_address(server: str) -> str:
    """This machine's address on the interface towards the server (no packet is sent: a UDP
    connect only picks the route); 127.0.0.1 when there is no route."""
    parsed = urllib.parse.urlsplit(server)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((parsed.hostname or "127.0.0.1", parsed.port or 80))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def run_checks(python: str, work_dir: Path, address: str, gpus: int = 0,
               timeout: float = TIMEOUT_S) -> protocol.HealthReport:
    """Run every check in `python`; {"ok": every check passed, "checks": [{name, ok, detail, seconds}]}."""
    started = time.monotonic()
    ask = json.dumps({"address": address, "gpus": gpus, "work_dir": str(work_dir)})
    try:
        done = subprocess.run([python, "-c", CHECKS, ask], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr, code = f"no answer within {timeout:.0f} s", None
    except OSError as exc:
        stdout, stderr, code = "", f"cannot start {python}: {exc}", None
    checks: list[protocol.HealthCheck] = []
    for line in stdout.splitlines():
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and {"name", "ok", "detail", "seconds"} <= found.keys():
            checks.append(cast("protocol.HealthCheck", found))  # the CHECKS program's line, every field there
    if code != 0 or not checks:
        checks.append({"name": "python", "ok": False, "seconds": round(time.monotonic() - started, 3),
                       "detail": (stderr.strip().splitlines() or [f"{python} exited with {code}"])[-1][:500]})
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def report(server: str, token: str, result: protocol.HealthReport, ca_file: str | None = None,
           timeout: float = 30.0) -> bool:
    """POST the result to the control plane; False (logged) when it cannot be delivered: the
    controller asks again later."""
    request = urllib.request.Request(server.rstrip("/") + protocol.HEALTH_PATH, data=json.dumps(result).encode(),
                                     method="POST", headers={"Authorization": f"Machine {token}",
                                                             "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls.https_context(ca_file)):
            return True
    except (urllib.error.URLError, OSError) as exc:
        log.warning("cannot report the health check to %s: %s", server, exc)
        return False
