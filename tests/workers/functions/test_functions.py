"""The function API's machine-free parts: what the caller builds (Compute, decorators, the spec, the
pickle), what a rank's runner leaves (run in a real Python process), and how a node turns that into
`result` events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest
import torchyard as ty
from torchyard import protocol
from torchyard.function_results import collect_results, first_failure
from torchyard.functions.compute import parse_size
from torchyard.functions.remote import FunctionError, RemoteFunction, pickle_call, project_root
from torchyard.functions.runner import peer_failure
from torchyard.supervisor.outputs import upload_file

WORKERS = Path(ty.__file__).resolve().parent.parent


def train(lr):
    return lr * 2


@pytest.mark.parametrize(("value", "expected"), [
    ("4Gi", 4 << 30), ("16GB", 16 * 10**9), ("512Mi", 512 << 20), (4096, 4096), ("1.5G", 1_500_000_000), (None, None)])
def test_sizes_read_as_kubernetes_quantities(value, expected):
    assert parse_size(value, "memory") == expected


@pytest.mark.parametrize("bad", ["lots", "-1", True, "4 parsecs"])
def test_a_size_that_is_not_one_is_refused_at_the_callers_line(bad):
    with pytest.raises(ValueError, match="memory"):
        ty.Compute(memory=bad)


def test_compute_and_distribute_become_the_spec_of_one_call():
    remote = ty.fn(train).to(ty.Compute(cpus=2, memory="4Gi", min_gpu_memory="40GiB", labels={"zone": "a"},
                                        requirements="einops==0.8", volumes=[ty.Volume("data", "/data")],
                                        env={"A": "1"})).distribute(framework="pytorch", workers=3)
    spec = remote.spec(code="c" * 64, payload="p" * 64)
    assert spec["resources"] == {"nodes": 3, "procs_per_node": 1, "gpus_per_node": 0, "cpus_per_node": 2,
                                 "memory_per_node": 4 << 30, "min_gpu_memory": 40 * 1024}
    assert spec["function"] == {"payload": "p" * 64, "name": "test_functions.train",
                                "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    assert spec["placement"] == {"labels": {"zone": "a"}} and spec["runtime"] == {"pip": ["einops==0.8"]}
    assert spec["volumes"] == [{"name": "data", "mount_path": "/data", "access_mode": "ReadWriteMany"}]
    assert spec["distributed"] == {"launcher": "torchrun"} and spec["env"] == {"A": "1"}
    # One process per GPU by default; "python" runs once per node with launcher none.
    assert ty.fn(train).to(gpus=4).distribute(workers=2).spec(code="c", payload="p")["resources"]["procs_per_node"] == 4
    assert ty.fn(train).distribute(framework="python", workers=2).spec(code="c", payload="p")["distributed"] == {
        "launcher": "none"}


@pytest.mark.parametrize(("call", "message"), [
    (lambda: ty.fn(train).distribute(framework="jax"), "framework 'jax' is not supported"),
    (lambda: ty.fn(train).distribute(workers=0), "workers=0"),
    (lambda: ty.distribute(workers=2, nproc_per_node=0), "nproc_per_node=0"),
    (lambda: ty.Volume("Bad Name"), "lower-case"),
    (lambda: ty.Compute(gpus=-1), "gpus=-1"),
])
def test_bad_options_fail_where_they_are_written(call, message):
    with pytest.raises((FunctionError, ValueError), match=message):
        call()


def test_the_decorators_stack_either_way_and_are_the_identity_inside_a_job(monkeypatch):
    def plain(x):
        return x

    one = ty.compute(cpus=2)(ty.distribute(workers=2)(plain))
    other = ty.distribute(workers=2)(ty.compute(cpus=2)(plain))
    for remote in (one, other):
        assert isinstance(remote, RemoteFunction)
        assert (remote.compute.cpus, remote.distribution.workers, remote.__name__) == (2, 2, "plain")
    monkeypatch.setenv(protocol.ENV_JOB_ID, "7")
    assert ty.compute(cpus=2)(ty.distribute(workers=2)(plain)) is plain


def test_the_project_is_the_nearest_folder_with_a_marker(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    module = project / "src" / "pkg" / "mod.py"
    module.write_text("def f():\n    return 1\n")
    namespace: dict = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    assert project_root(namespace["f"]) == project.resolve()
    monkeypatch.chdir(tmp_path)
    assert project_root(eval("lambda: 1")) == tmp_path.resolve()  # typed at a prompt: the current folder


def test_an_unpicklable_call_is_refused_naming_the_function():
    import threading

    lock = threading.Lock()
    with pytest.raises(FunctionError, match=r"cannot send .*<lambda> to the cluster: .*cannot be pickled"):
        pickle_call(lambda: lock, (), {})


def _run_rank(tmp_path: Path, function, *args, rank: int = 0, limit: int = 10_000, meta: dict | None = None):
    payload = tmp_path / "payload"
    payload.mkdir(exist_ok=True)
    (payload / "function.pkl").write_bytes(cloudpickle.dumps((function, args, {})))
    (payload / "function.json").write_text(json.dumps(meta or {}))
    results = tmp_path / "results"
    env = {**os.environ, "RANK": str(rank), protocol.ENV_RESULTS_DIR: str(results),
           protocol.ENV_FUNCTION_PAYLOAD: str(payload / "function.pkl"), protocol.ENV_RESULT_MAX_BYTES: str(limit),
           "PYTHONPATH": str(WORKERS)}
    done = subprocess.run([sys.executable, "-m", "torchyard.functions.runner"], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60)
    meta_file = results / f"rank-{rank}.json"
    return done, (json.loads(meta_file.read_text()) if meta_file.exists() else None), results


def _by_value(source: str, name: str):
    """A function as a script's `__main__` defines it: cloudpickle ships it by value."""
    namespace: dict = {"__name__": "__main__"}
    exec(source, namespace)
    return namespace[name]


def test_a_rank_that_returns_leaves_its_value_and_repr(tmp_path):
    done, meta, results = _run_rank(tmp_path, _by_value("def double(x):\n    return x * 2\n", "double"), 0.25, rank=3)
    assert done.returncode == 0, done.stderr
    assert meta["ok"] and meta["rank"] == 3 and meta["repr"] == "0.5"
    assert cloudpickle.loads((results / "rank-3.pkl").read_bytes()) == 0.5


def test_a_rank_that_raises_leaves_the_exception_and_its_traceback_pointing_at_the_file(tmp_path):
    source = tmp_path / "exp.py"
    source.write_text("def boom(x):\n    y = x + 1\n    raise KeyError(f'no {y}')\n")
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    done, meta, results = _run_rank(tmp_path, namespace["boom"], 1, meta={"source": "exp.py"})
    assert done.returncode == 1
    assert (meta["ok"], meta["error_type"], meta["error"], meta["peer_failure"]) == (False, "KeyError", "'no 2'", False)
    # cloudpickle ships code as "<dynamic-code>": the runner points it back at the file.
    assert f'File "{source}", line 3, in boom' in meta["traceback"]
    assert "raise KeyError(f'no {y}')" in meta["traceback"]
    assert isinstance(cloudpickle.loads((results / "rank-0.pkl").read_bytes()), KeyError)


def test_a_value_over_the_limit_fails_the_rank_saying_where_to_write_it(tmp_path):
    done, meta, results = _run_rank(tmp_path, bytes, 50_000, limit=1000)
    assert done.returncode == 1 and meta["error_type"] == "ResultTooLarge"
    assert "50.0 kB, over the 1.0 kB limit" in meta["error"] and "$TORCHYARD_OUTPUT_DIR" in meta["error"]
    assert not (results / "rank-0.pkl").exists()


def test_a_peers_disappearance_is_told_apart_from_the_functions_own_error():
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
    assert peer_failure(gloo) and not peer_failure(ValueError("Connection reset by peer in my parser"))
    own = {"ok": False, "rank": 3, "raised_at": 10.2, "peer_failure": False}
    consequence = {"ok": False, "rank": 0, "raised_at": 10.0, "peer_failure": True}
    assert first_failure([{"ok": True, "rank": 1}, consequence, own]) is own
    assert first_failure([consequence]) is consequence and first_failure([{"ok": True}]) is None
    # As the API gives them: ISO 8601 times, or none at all (last).
    api = [{"ok": False, "rank": 1, "raised_at": None}, {"ok": False, "rank": 2, "raised_at": "2026-11-25T13:07:49+00:00"}]
    assert first_failure(api) is api[1]


def test_a_node_stores_every_ranks_result_and_says_which_had_none(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for rank, ok in ((2, True), (3, False)):
        (results / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "ok": ok, "size": 3, "repr": "'v'",
                                                                "error_type": "" if ok else "ResultTooLarge"}))
    (results / "rank-2.pkl").write_bytes(b"abc")
    store = tmp_path / "store"
    events, failures = collect_results(results, upload_file, store.as_uri())
    assert failures == [] and [e["rank"] for e in events] == [2, 3]
    assert events[0]["uri"] == f"{store.as_uri()}/rank-2.pkl" and (store / "rank-2.pkl").read_bytes() == b"abc"
    assert events[1]["uri"] == "" and events[1]["error_type"] == "ResultTooLarge"
