"""What the control plane makes of `stalled` events: one view of the job's stalled ranks, and a
verdict only a view across every node can give.

A supervisor sees its own ranks stop (workers/torchyard/supervisor/stall.py). Whether that is one
slow rank (a straggler: the others moved on, or wait for it) or every rank stopped at the same step
together (a hung collective) needs the whole job: the ranks' last steps from their metrics
(`progress.step_by_rank`) and the stalled ranks reported so far. The verdict lives in
`job.progress["stall"]` for the current attempt and is cleared when the stalled ranks move again.

When one rank holds the others, the verdict names it and its machine (`culprits`), from the
strongest evidence there is: its process state (stopped, dead, in uninterruptible sleep), else a
node of the attempt whose heartbeats stopped (a host gone quiet), else a stack outside any
collective while other ranks wait in one. Under `on_stall: recover` the stall ends the attempt, and
each culprit's machine named by the first two (MACHINE_EVIDENCE: a stack points at the script) is
quarantined (machines.services.machine_quarantine): the relaunch goes
elsewhere (a hot spare, fewer nodes for an elastic job, another free machine, else the queue), and
nothing is placed on that machine until an operator or its health check releases it.
"""

from __future__ import annotations

from typing import Literal

from django.db import transaction
from django.utils import timezone
from torchyard.stream_contract import StalledEvent

from ...machines.services import machine_quarantine
from ..models import Job, JobNode
from ..spec.jobspec import JobSpec
from ..spec.progress import Culprit, JobProgress, QuietNode, StalledRank, StallView
from ..states import NODE_LIVE

N = JobNode.Status

# Process states (psutil's words, as the supervisor reports them) that name the rank by themselves.
SUSPICIOUS_STATES = {
    "stopped": "process stopped, SIGSTOP?",
    "tracing-stop": "process stopped by a debugger",
    "zombie": "process dead",
    "dead": "process dead",
    "gone": "process gone",
    "disk-sleep": "process in uninterruptible sleep (D state: a disk, a driver)",
}


# What a stall is, as classify_stall judges it.
StallKind = Literal["culprit", "collective", "straggler", "rank"]


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def find_culprits(stalled: dict[str, StalledRank], quiet: list[QuietNode]) -> list[Culprit]:
    """The ranks (or nodes) that hold the others, from the strongest evidence only; [] when none
    says so. `quiet`: the attempt's nodes whose heartbeats stopped (see _quiet_nodes)."""
    by_state = [(int(r), info, state) for r, info in stalled.items()
                if (state := info.get("process_state")) is not None and state in SUSPICIOUS_STATES]
    if by_state:
        return [{"rank": r, "ranks": [r], "machine": info.get("machine"), "node_rank": info.get("node_rank"),
                 "cause": "process", "evidence": SUSPICIOUS_STATES[state]}
                for r, info, state in sorted(by_state, key=lambda item: item[0])]
    if quiet:
        return [{"rank": None, "ranks": list(range(q["ranks"][0], q["ranks"][1] + 1)), "machine": q["machine"],
                 "node_rank": q["node_rank"], "cause": "heartbeat",
                 "evidence": f"no heartbeat for {q['silent_for']:g} s" if q.get("silent_for") is not None
                 else "no heartbeat"} for q in quiet]
    # `waits_in` is "" for a stack outside any collective, None when the stack could not be read.
    if any(info.get("waits_in") for info in stalled.values()):
        outside = sorted((int(r), info) for r, info in stalled.items() if info.get("waits_in") == "")
        return [{"rank": r, "ranks": [r], "machine": info.get("machine"), "node_rank": info.get("node_rank"),
                 "cause": "stack", "evidence": f"outside any collective, in {info.get('frame') or '?'}"}
                for r, info in outside]
    return []


def describe_culprit(culprit: Culprit) -> str:
    """"rank 2 on machine m2 (process stopped, SIGSTOP?)", or for a node gone quiet
    "machine m2 (node 1, ranks 2-3: no heartbeat for 12 s)"."""
    if culprit["rank"] is not None:
        where = f" on machine {culprit['machine']}" if culprit["machine"] else ""
        return f"rank {culprit['rank']}{where} ({culprit['evidence']})"
    ranks = culprit["ranks"]
    span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    return f"machine {culprit['machine']} (node {culprit['node_rank']}, {span}: {culprit['evidence']})"


def _at_steps(steps: list[int]) -> str:
    if not steps:
        return ""
    low, high = min(steps), max(steps)
    return f" at step {low}" if low == high else f" at steps {low}-{high}"


def classify_stall(stalled: dict[str, StalledRank], steps: dict[str, int], world_size: int,
                   quiet: list[QuietNode] | None = None) -> tuple[StallKind, str, list[Culprit]]:
    """(kind, summary, culprits): "culprit" when the evidence names the ranks that hold the others
    (find_culprits), else "collective" when every rank stopped at one step, "straggler" when the
    stalled ranks are behind others, "rank" otherwise (others may still be about to stop)."""
    at = {int(rank): int(info["step"] or 0) for rank, info in stalled.items()}
    culprits = find_culprits(stalled, quiet or [])
    if culprits:
        held = {r for c in culprits for r in c["ranks"]}
        others = [r for r in range(max(world_size, max(at) + 1)) if r not in held]
        summary = " and ".join(map(describe_culprit, culprits)) + (" holds" if len(culprits) == 1 else " hold") + " the job"
        if others:
            known = [at[r] if r in at else steps.get(str(r)) for r in others]
            waiting = all((info := stalled.get(str(r))) is not None and info.get("waits_in") for r in others)
            summary += (f": {_ranks(others)} wait{'s' if len(others) == 1 else ''}{' in a collective' if waiting else ''}"
                        f"{_at_steps([s for s in known if isinstance(s, int)])}")
        return "culprit", summary, culprits
    ranks = ", ".join(str(r) for r in sorted(at))
    others_at = {int(r): int(s) for r, s in steps.items() if int(r) not in at}
    if len(at) >= world_size and len(set(at.values())) == 1:
        return "collective", f"all {world_size} ranks stopped together at step {next(iter(at.values()))}: a hung collective", []
    if others_at and max(others_at.values()) > max(at.values()):
        return "straggler", (f"rank{'s' if len(at) > 1 else ''} {ranks} stalled at step {min(at.values())} while "
                             f"rank {max(others_at, key=lambda r: others_at[r])} reached step "
                             f"{max(others_at.values())}: a straggler"), []
    return "rank", f"rank{'s' if len(at) > 1 else ''} {ranks} stalled at step {min(at.values())}", []


def _judge(stall: StallView, steps: dict[str, int], world_size: int) -> None:
    stall["kind"], stall["summary"], stall["culprits"] = classify_stall(
        stall["ranks"], steps, world_size or len(stall["ranks"]), stall.get("quiet"))


def _quiet_nodes(job: Job, attempt: int, reporting: set[int]) -> list[QuietNode]:
    """The attempt's nodes declared lost, or live without a heartbeat for half the heartbeat timeout
    (two beats missed), that reported no stall themselves: a host gone quiet."""
    timeout = float(JobSpec.from_json(job.spec).fault_tolerance.heartbeat_timeout)
    now = timezone.now()
    quiet: list[QuietNode] = []
    for node in JobNode.objects.filter(job_id=job.pk, attempt=attempt).exclude(node_rank__in=reporting).values(
            "node_rank", "machine_name", "status", "last_heartbeat", "rank_start", "rank_end"):
        beat = node["last_heartbeat"]
        silent = (now - beat).total_seconds() if beat else None
        if node["status"] == N.LOST or (node["status"] in NODE_LIVE and silent is not None and silent > timeout / 2):
            quiet.append({"node_rank": node["node_rank"], "machine": node["machine_name"],
                          "ranks": [node["rank_start"], node["rank_end"]],
                          "silent_for": round(silent) if silent is not None else None})
    return quiet


# What a culprit is named by that points at its machine: its process stopped, dead or stuck in the
# kernel, or its node gone quiet. A stack outside any collective points at the script (its own
# deadlock would hang on any machine): the rank is named, its machine is not quarantined.
MACHINE_EVIDENCE = ("process", "heartbeat")


def _quarantine_culprits(job: Job, stall: StallView) -> None:
    """Under `on_stall: recover` each culprit's machine is quarantined (MACHINE_EVIDENCE), once per
    attempt: the machines done are kept in the stall view, saved in the same transaction."""
    done = stall.setdefault("quarantined", [])
    for culprit in stall.get("culprits", []):
        machine = culprit["machine"]
        if machine is None or machine in done or culprit["node_rank"] is None or culprit["cause"] not in MACHINE_EVIDENCE:
            continue
        machine_id = JobNode.objects.filter(job_id=job.pk, attempt=stall["attempt"], node_rank=culprit["node_rank"]) \
            .values_list("machine_id", flat=True).first()
        steps = [step for info in stall["ranks"].values() if isinstance(step := info.get("step"), int)]
        reason = f"{describe_culprit(culprit)} held job #{job.pk} (attempt {stall['attempt']}){_at_steps(steps)}"
        if machine_id is not None and machine_quarantine(machine_id=machine_id, reason=reason, job_id=job.pk):
            done.append(machine)


def job_record_stall(*, job_id: int, event_id: int, attempt: int, node_id: int | None, rank: int | None,
                     payload: StalledEvent) -> None:
    """Fold one `stalled` event into the job's stall view (current attempt only)."""
    if rank is None:
        return
    with transaction.atomic():
        # Locks: the job, then (machine_quarantine) the culprits' machines.
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.attempt != attempt:
            return
        progress = JobProgress.from_json(job.progress)
        stall = progress.stall
        if stall is None or stall.get("attempt") != attempt:
            stall = {"attempt": attempt, "ranks": {}}
        node = JobNode.objects.filter(pk=node_id).values("machine_name", "node_rank").first() or {}
        stall["ranks"][str(rank)] = {
            "step": payload.get("step"),
            "stalled_for": payload.get("stalled_for"),
            "timeout": payload.get("timeout"),
            "timeout_basis": str(payload.get("timeout_basis") or "")[:300],
            "process_state": payload.get("process_state"),
            "waits_in": payload.get("waits_in"),
            "frame": payload.get("frame"),
            "last_line": payload.get("last_line"),
            "machine": node.get("machine_name"),
            "node_rank": node.get("node_rank"),
            "event": event_id,
        }
        reporting = {node_rank for info in stall["ranks"].values() if (node_rank := info.get("node_rank")) is not None}
        stall["quiet"] = _quiet_nodes(job, attempt, reporting)
        _judge(stall, progress.step_by_rank or {}, job.world_size)
        if JobSpec.from_json(job.spec).fault_tolerance.on_stall == "recover":
            _quarantine_culprits(job, stall)
        progress.stall = stall
        Job.objects.filter(pk=job_id).update(progress=progress.to_json())


def stall_verdict(job: Job, attempt: int) -> str:
    """The attempt's verdict when it names who held the job, for the reason of the attempt's end;
    "" otherwise."""
    stall = JobProgress.from_json(job.progress).stall
    if stall is None or stall.get("attempt") != attempt or not stall.get("culprits"):
        return ""
    return stall.get("summary", "")


def clear_moved_ranks(progress: JobProgress, steps: dict[str, int], world_size: int) -> None:
    """Drop from the stall view the ranks whose step moved past the one they stalled at, and judge
    again what is left."""
    stall = progress.stall
    if not stall:
        return
    moved = [rank for rank, info in stall["ranks"].items() if steps.get(rank, -1) > (info.get("step") or 0)]
    for rank in moved:
        del stall["ranks"][rank]
    if not stall["ranks"]:
        progress.stall = None
    elif moved:
        _judge(stall, steps, world_size)
