"""The job `torchyard validate` runs: one real 2-node job through every part of an installation.

Its code is examples/_validate_crash_once.py, uploaded as a bundle (crash_once.py): Torchyard's built-in recipe
examples/mlp_ddp.py on 2 machines x 1 process (STEPS steps, STEP_SLEEP s each, a checkpoint every
CHECKPOINT_EVERY steps, one restart allowed), whose last rank kills itself with SIGKILL once, on the
first attempt, a moment after the first checkpoint committed. The checks read what the server
recorded (the job's events), in the order it happens:

    upload             the bundle is on the server (sent unless it already was)
    start              the job runs on two machines and every rank reported a step
    first_checkpoint   a checkpoint of the first attempt committed (manifest, sha256, write time)
    recovery           the kill was noticed (a node failed by SIGKILL, the job `recovering`), the next
                       attempt resumed from a committed checkpoint (its ranks say at which step) and
                       the job completed every step
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from ..stream_contract import CheckpointEvent, EventEnvelope, JobEvent, LogEvent, MetricEvent, StateEvent
from . import CliError
from .http import ApiClient
from .specfile import JobSpecBody
from .upload import upload_project

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "_validate_crash_once.py"
ENTRYPOINT = "crash_once.py"
STEPS, STEP_SLEEP, CHECKPOINT_EVERY = 120, 0.05, 20
FINAL = ("completed", "failed", "stopped")
POLL_S = 0.5
RESUMED = re.compile(r"resumed from checkpoint at step (\d+)")  # what the recipe prints on a resume
T = TypeVar("T")


def _ts(event: EventEnvelope) -> float:
    """An event's time, as the REST routes send it (ISO 8601)."""
    return datetime.fromisoformat(str(event.get("ts"))).timestamp()


def job_spec(bundle: str) -> JobSpecBody:
    return {
        "name": "torchyard-validate", "entrypoint": ENTRYPOINT, "code": {"bundle": bundle},
        "args": ["--steps", str(STEPS), "--step-sleep", str(STEP_SLEEP)],
        "resources": {"nodes": 2, "procs_per_node": 1},
        "checkpointing": {"enabled": True, "every_n_steps": CHECKPOINT_EVERY, "keep": 3},
        "fault_tolerance": {"max_restarts": 1},
    }


class ValidationJob:
    class Failed(Exception):
        """A step of the job went wrong; the message is the cause."""

    def __init__(self, api: ApiClient, *, timeout: float) -> None:
        self.api = api
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.bundle = ""
        self.job_id: int | None = None
        self.events: list[JobEvent] = []
        self.after = 0
        self.submitted = 0.0

    # --- the steps --------------------------------------------------------------------------------
    def upload(self) -> str:
        with tempfile.TemporaryDirectory(prefix="torchyard-validate-") as tmp:
            shutil.copyfile(SCRIPT, Path(tmp) / ENTRYPOINT)
            self.bundle = upload_project(self.api, Path(tmp), Console(quiet=True), entrypoint=ENTRYPOINT)
        return f"{ENTRYPOINT} (the built-in recipe examples/mlp_ddp.py, one rank set to kill itself once) as " \
               f"bundle {self.bundle[:12]}"

    def start(self) -> str:
        job = self.api.call("POST", "/api/jobs", job_spec(self.bundle))
        self.job_id, self.submitted = int(job["id"]), time.time()
        world = int(job.get("world_size") or 2)

        def every_rank_stepped() -> dict[int, float] | None:
            first: dict[int, float] = {}
            for e in self.metrics(attempt=0):
                first.setdefault(int(e.get("rank") or 0), _ts(e))
            return first if len(first) >= world else None

        first = self.wait("every rank's first step", every_rank_stepped)
        plan = self.api.call("GET", f"/api/jobs/{self.job_id}")["plan"] or {}
        machines = [n.get("machine_name") for n in plan.get("nodes") or []]
        return (f"job #{self.job_id} on {' and '.join(map(str, machines))} ({world} ranks, {plan.get('backend')}): "
                f"every rank reported a step {max(first.values()) - self.submitted:.1f} s after submission")

    def first_checkpoint(self) -> str:
        event = self.wait("a committed checkpoint", lambda: next(iter(self.checkpoints(attempt=0)), None))
        manifest = event.get("manifest")
        # Retention (keep 3) deletes none of attempt 0's while it runs: one at least is listed.
        recorded = self.api.call("GET", f"/api/jobs/{self.job_id}/checkpoints")
        if not any(c["attempt"] == 0 for c in recorded):
            raise self.Failed(f"the checkpoint at step {event['step']} was announced, but the server lists none")
        # Read defensively, as an older SDK may have written it.
        files = (manifest.get("files") if manifest else None) or []
        size = (manifest.get("total_bytes") if manifest else None) or 0
        save = manifest.get("save") if manifest else None
        blocked = (save.get("blocking_seconds") if save else None) or 0
        return (f"step {event['step']} of attempt 0: {len(files)} file(s), {size / 1e3:.0f} kB, "
                f"sha256 each, written in {blocked:.3f} s, to {_store_of(event['uri'])}")

    def recovery(self) -> str:
        final = self.wait("the job's end", lambda: self.job_state(FINAL))
        states = self.states()
        killed = [e for e in states if e.get("scope") == "node" and e.get("attempt") == 0 and e["status"] == "failed"]
        if final["status"] != "completed":
            raise self.Failed(f"the job {final['status']}: {final.get('reason')}")
        if final.get("attempt") == 0:
            raise self.Failed(f"the job completed without the rank being killed (the kill is armed "
                              f"{CHECKPOINT_EVERY} steps in; was a checkpoint saved?)")
        if not any("SIGKILL" in str(e.get("reason")) for e in killed):
            raise self.Failed("the job restarted, but not because of the killed rank: "
                              + "; ".join(str(e.get("reason")) for e in killed))
        recovering = next((e for e in states if e.get("scope") == "job" and e["status"] == "recovering"), final)
        resumed = {int(m.group(1)) for e in self.logs(attempt=1) if (m := RESUMED.search(e["line"]))}
        committed = {e["step"] for e in self.checkpoints(attempt=0)}
        if not resumed:
            raise self.Failed("attempt 1 started from scratch: no rank resumed from the committed checkpoint "
                              f"(steps {sorted(committed)} of attempt 0)")
        if not resumed <= committed:
            raise self.Failed(f"attempt 1 resumed from step(s) {sorted(resumed)}, not a checkpoint attempt 0 "
                              f"committed ({sorted(committed)})")
        first_step = min((_ts(e) for e in self.metrics(attempt=1)), default=_ts(final))
        job = self.api.call("GET", f"/api/jobs/{self.job_id}")
        done = (job.get("progress") or {}).get("step")
        if done != STEPS:
            raise self.Failed(f"the job completed at step {done}, not {STEPS}")
        return (f"node {killed[0].get('node_rank')} failed ({_reason_tail(killed[0])}); the job was "
                f"recovering {_ts(recovering) - _ts(killed[0]):.1f} s later; attempt 1 resumed from the step "
                f"{max(resumed)} checkpoint, trained again {first_step - _ts(recovering):.1f} s after the "
                f"failure was noticed, and completed step {STEPS}")

    # --- cleaning up ------------------------------------------------------------------------------
    def clean_up(self, *, delete: bool) -> bool:
        """Stop the job if it still runs; delete it when asked. Returns whether the job is kept."""
        if self.job_id is None:
            return False
        try:
            if self.api.call("GET", f"/api/jobs/{self.job_id}")["status"] not in FINAL:
                self.api.call("POST", f"/api/jobs/{self.job_id}/stop")
                deadline = time.monotonic() + 60
                while self.api.call("GET", f"/api/jobs/{self.job_id}")["status"] not in FINAL:
                    if time.monotonic() > deadline:
                        return True
                    time.sleep(POLL_S)
            if delete:
                self.api.call("DELETE", f"/api/jobs/{self.job_id}")
                return False
        except CliError:
            pass  # the report says the job is kept; its check already says what went wrong
        return True

    # --- reading the job's events -----------------------------------------------------------------
    def poll(self) -> None:
        while True:
            page = self.api.call("GET", f"/api/jobs/{self.job_id}/events?after={self.after}"
                                        f"&type=state,metric,checkpoint,log&limit=1000")
            if not page["events"]:
                return
            self.events.extend(page["events"])
            self.after = page["next_after"]

    def states(self) -> list[StateEvent]:
        return [e for e in self.events if e["type"] == "state"]

    def metrics(self, *, attempt: int) -> list[MetricEvent]:
        return [e for e in self.events if e["type"] == "metric" and e.get("attempt") == attempt]

    def checkpoints(self, *, attempt: int) -> list[CheckpointEvent]:
        return [e for e in self.events if e["type"] == "checkpoint" and e.get("attempt") == attempt]

    def logs(self, *, attempt: int) -> list[LogEvent]:
        return [e for e in self.events if e["type"] == "log" and e.get("attempt") == attempt]

    def job_state(self, statuses: tuple[str, ...]) -> StateEvent | None:
        return next((e for e in reversed(self.states()) if e.get("scope") == "job" and e["status"] in statuses), None)

    def wait(self, what: str, found: Callable[[], T | None]) -> T:
        """Poll the job's events until `found()` returns something; the job ending first, or the
        deadline passing, fails with where the job stands."""
        while True:
            self.poll()
            result = found()
            if result is not None:
                return result
            ended = self.job_state(FINAL)
            if ended is not None:
                raise self.Failed(f"the job {ended['status']} before {what}: {ended.get('reason')}")
            if time.monotonic() > self.deadline:
                last = next((e for e in reversed(self.states()) if e.get("scope") == "job"), None)
                where = f"the job is {last['status']}: {last.get('reason')}" if last else "the job has no state yet"
                raise self.Failed(f"{what} did not come within {self.timeout:g} s (--timeout); {where}")
            time.sleep(POLL_S)


def _store_of(uri: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}{parts.path.rsplit('/job-', 1)[0]}"


def _reason_tail(event: StateEvent) -> str:
    reason = str(event.get("reason") or "")
    return reason.split("first failure: ", 1)[-1].split("\n", 1)[0]
