"""A user's project, written by a test outside the repository: what `torchyard run` is for.

`make_project(root)` writes train.py (imports a local module, reads a data file, imports a package
its requirements.txt names by path, all-reduces across every rank, writes outputs), a local wheel
it depends on (built here by hand, so no registry is needed) and ignore files."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

TRAIN = '''\
import argparse
import os

import torch
import torch.distributed as dist

import helpers
import tinypkg

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
numbers = helpers.read_numbers("data/numbers.txt")
total = torch.tensor([float(sum(numbers) * (rank + 1))])
dist.all_reduce(total)
print(f"rank {rank}/{world}: lr={args.lr} tinypkg={tinypkg.VALUE} total={total.item():.0f}", flush=True)
if rank == args.fail_rank:
    raise SystemExit(3)
out = os.environ.get("TORCHYARD_OUTPUT_DIR", "outputs")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"rank-{rank}.txt"), "w") as handle:
    handle.write(f"rank {rank} of {world}: total {total.item():.0f}\\n")
dist.barrier()
dist.destroy_process_group()
'''

HELPERS = '''\
def read_numbers(path):
    with open(path) as handle:
        return [int(line) for line in handle if line.strip()]
'''

PLAIN_FAILING = '''\
import os
import sys
import time

rank = int(os.environ["RANK"])
print(f"plain script rank {rank} starting", flush=True)
if rank == int(sys.argv[1]):
    print(f"rank {rank} gives up", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(60)
'''


def build_wheel(directory: Path, name: str = "tinypkg", version: str = "0.1", value: int = 42) -> Path:
    """A pure-Python wheel written with zipfile: installing it needs neither a build backend nor PyPI."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n".encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: torchyard-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    (root / "helpers.py").write_text(HELPERS)
    (root / "data").mkdir()
    (root / "data" / "numbers.txt").write_text("1\n2\n3\n4\n")
    build_wheel(root / "wheels")
    (root / "requirements.txt").write_text("# a local package, by path as pip reads it from the project\n"
                                           "./wheels/tinypkg-0.1-py3-none-any.whl\n")
    (root / ".gitignore").write_text("scratch/\n*.log\n")
    (root / "scratch").mkdir()
    (root / "scratch" / "huge.bin").write_bytes(b"\0" * 1024)
    (root / "debug.log").write_text("not code\n")
    (root / "plain_fail.py").write_text(PLAIN_FAILING)
    return root
