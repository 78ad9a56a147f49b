"""Stragglers: a rank that stays much slower than the job's other ranks, named with what its machine
shows, and under `fault_tolerance.stragglers: replace` moved onto a hot spare at the next committed
checkpoint.

Every node reports its ranks' pace each window (workers/torchyard/supervisor/pace.py): a rank's own
time per step, the part of the step it did not spend waiting on its peers. In synchronous training
that is about the whole step for the rank the others wait for and its compute alone for the others,
so the slow rank stands out even though every rank takes the same wall time per step. Here each
rank's own step time is set against the median of the other ranks' (the other ranks': with two ranks
a median that includes the rank itself halves the difference); a rank more than
`straggler_threshold` above it for `straggler_window` seconds is named, in a `straggler` event and in
the job's progress (`stragglers`), and cleared the same way once it keeps up again.

The view lives in `job.progress`: `pace` (internal: each rank's last window and since when it has
been slow) and `stragglers` (shown), both per attempt.
"""

from __future__ import annotations

import statistics
from typing import Literal

from django.db import transaction
from torchyard import protocol
from torchyard.stream_contract import PaceEvent, PaceHost, StragglerEvent

from ..events import publish_on_commit
from ..models import Job, JobNode
from ..spec.jobspec import FaultTolerance, JobSpec
from ..spec.progress import JobProgress, PaceView, RankWindow, Straggler

# fault_tolerance.stragglers, once not "off".
Policy = Literal["report", "replace"]
# Below this gap (seconds per step) between a rank and the median nothing is named, whatever the
# ratio: on steps of a few milliseconds the sampling's noise is of that order.
MIN_GAP_S = 0.005
# Shares of the window worth a word in the evidence.
WORTH_SAYING = 0.05


def _evidence(figures: RankWindow, host: PaceHost | None) -> str:
    """What the rank's machine showed over its last window that would make it slow, in words."""
    said = []
    if (stopped := figures.get("stopped") or 0) >= WORTH_SAYING:
        said.append(f"its process was stopped {stopped:.0%} of the time (SIGSTOP, a debugger?)")
    if (throttled := figures.get("throttled") or 0) > 0:
        said.append(f"its cgroup's CPU quota throttled it {throttled} times")
    if (cpu_wait := figures.get("cpu_wait") or 0) >= WORTH_SAYING:
        said.append(f"it waited for a CPU {cpu_wait:.0%} of the time")
    if host is not None and (steal := host.get("steal") or 0) >= WORTH_SAYING:
        said.append(f"the machine's CPU steal was {steal:.0%}")
    others = (host.get("others") if host is not None else None) or []
    if others:
        busiest = ", ".join(f"{o.get('name')} (pid {o.get('pid')}, {o.get('cpu')} CPU)" for o in others)
        said.append(f"the busiest other processes: {busiest}")
    return "; ".join(said) if said else "nothing on its machine explains it (a slower device, its data?)"


def _judge(pace: PaceView, ft: FaultTolerance, now: float, reported: list[str]) -> tuple[list[str], list[str]]:
    """Set the `slow_since` of the ranks just `reported` against the other ranks' median; (ranks
    named now, ranks cleared). Each rank is judged on its own node's reports: by its newest figures."""
    ranks = pace["ranks"]
    # A rank whose last window is older than three is gone quiet (stalls.py's business), not slow.
    fresh = {r: f for r, f in ranks.items() if now - f["at"] <= 3 * pace.get("every", 10.0) + 5}
    named, cleared = [], []
    for rank, figures in fresh.items():
        if rank not in reported:
            continue
        others = [f["own_step_s"] for r, f in fresh.items() if r != rank]
        if not others:
            continue
        median = statistics.median(others)
        figures["median_s"] = round(median, 4)
        slow = figures["own_step_s"] - median > MIN_GAP_S and figures["own_step_s"] > median * (1 + ft.straggler_threshold)
        if not slow:
            figures.pop("slow_since", None)
            if rank in pace["named"]:
                pace["named"].remove(rank)
                cleared.append(rank)
            continue
        figures.setdefault("slow_since", figures["at"] - figures.get("window_s", 0.0))
        if rank not in pace["named"] and now - figures["slow_since"] >= ft.straggler_window:
            pace["named"].append(rank)
            named.append(rank)
    return named, cleared


def _straggler_entry(rank: str, figures: RankWindow, host: PaceHost | None, policy: Policy,
                     replace: str | None) -> Straggler:
    median = figures.get("median_s") or 0.0
    entry: Straggler = {
        "rank": int(rank), "machine": figures.get("machine"), "node_rank": figures.get("node_rank"),
        "own_step_s": figures["own_step_s"], "median_s": median,
        "ratio": round(figures["own_step_s"] / median, 2) if median > 0 else None,
        "step_s": figures.get("step_s"), "slow_since": figures.get("slow_since"),
        "evidence": _evidence(figures, host), "policy": policy,
    }
    if replace is not None:
        entry["replace"] = replace
    return entry


def describe(entry: Straggler) -> str:
    """"rank 3 on machine m2 takes 0.41 s of its own per step against a median of 0.12 s (3.4x): ..."."""
    where = f" on machine {entry['machine']}" if entry.get("machine") else ""
    ratio = f" ({entry['ratio']:g}x)" if entry.get("ratio") else ""
    return (f"rank {entry['rank']}{where} takes {entry['own_step_s']:.3g} s of its own per step against a median of "
            f"{entry['median_s']:.3g} s for the other ranks{ratio}: {entry.get('evidence', '')}")


def job_record_pace(*, job_id: int, attempt: int, node_id: int | None, ts: float, payload: PaceEvent) -> None:
    """Fold one node's `pace` event into the job's view; name and clear stragglers (current attempt only)."""
    ranks = payload.get("ranks")
    if node_id is None or not isinstance(ranks, dict):
        return
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.attempt != attempt:
            return
        ft = JobSpec.from_json(job.spec).fault_tolerance
        if ft.stragglers == "off":
            return
        policy: Policy = "replace" if ft.stragglers == "replace" else "report"
        progress = JobProgress.from_json(job.progress)
        pace = progress.pace if progress.pace is not None and progress.pace.get("attempt") == attempt else None
        pace = pace or {"attempt": attempt, "every": ft.pace_every, "ranks": {}, "hosts": {}, "named": []}
        node = JobNode.objects.filter(pk=node_id).values("machine_name", "node_rank").first() or {}
        if isinstance(payload.get("host"), dict):
            pace["hosts"][str(node.get("node_rank"))] = payload["host"]
        window = float(payload.get("window_s") or 0.0)
        reported = []
        for rank, figures in ranks.items():
            if not isinstance(figures, dict) or not isinstance(own := figures.get("own_step_s"), int | float):
                continue
            before = pace["ranks"].get(str(rank))
            seen: RankWindow = {
                "own_step_s": own, "step_s": figures.get("step_s"), "own_share": figures.get("own_share"),
                "stopped": figures.get("stopped"), "cpu_wait": figures.get("cpu_wait"),
                "throttled": figures.get("throttled"),
                "machine": node.get("machine_name"), "node_rank": node.get("node_rank"), "at": ts, "window_s": window,
            }
            if before is not None and "slow_since" in before:
                seen["slow_since"] = before["slow_since"]
            pace["ranks"][str(rank)] = seen
            reported.append(str(rank))
        named, cleared = _judge(pace, ft, ts, reported)
        stragglers = {str(s["rank"]): s for s in progress.stragglers or []}
        for rank in cleared:
            stragglers.pop(rank, None)
        for rank in pace["named"]:  # named now or before: their figures move on
            window_figures = pace["ranks"][rank]
            earlier = stragglers.get(rank)
            replace = (earlier.get("replace") if earlier is not None else None) or (
                "pending" if ft.stragglers == "replace" else None)
            stragglers[rank] = _straggler_entry(rank, window_figures,
                                                pace["hosts"].get(str(window_figures.get("node_rank"))), policy, replace)
        progress.pace = pace
        progress.stragglers = sorted(stragglers.values(), key=lambda s: s["rank"]) or None
        Job.objects.filter(pk=job_id).update(progress=progress.to_json())
        # Only the reporting node's ranks are judged (_judge): the event is that node's.
        for rank in named:
            _announce(job, node_id, stragglers[rank], "named")
        for rank in cleared:
            window_figures = pace["ranks"][rank]
            _announce(job, node_id, {"rank": int(rank), "machine": window_figures.get("machine"),
                                     "node_rank": window_figures.get("node_rank"),
                                     "own_step_s": window_figures["own_step_s"],
                                     "median_s": window_figures.get("median_s"), "policy": policy}, "cleared")


def _announce(job: Job, node: int, entry: Straggler, state: Literal["named", "cleared"]) -> None:
    """A `straggler` event of the controller's: the job page and `torchyard logs` show it."""
    summary = describe(entry) if state == "named" else (
        f"rank {entry['rank']} keeps up again ({entry['own_step_s']:.3g} s of its own per step)")
    event: StragglerEvent = {"type": protocol.STRAGGLER, "job": job.pk, "attempt": job.attempt, "node": node,
                             "node_rank": entry.get("node_rank"), "rank": entry["rank"], "state": state,
                             "summary": summary, "machine": entry["machine"], "own_step_s": entry["own_step_s"],
                             "median_s": entry["median_s"], "policy": entry["policy"]}
    if "ratio" in entry:
        event["ratio"] = entry["ratio"]
    if "step_s" in entry:
        event["step_s"] = entry["step_s"]
    if "slow_since" in entry:
        event["slow_since"] = entry["slow_since"]
    if "evidence" in entry:
        event["evidence"] = entry["evidence"]
    if "replace" in entry:
        event["replace"] = entry["replace"]
    publish_on_commit(event)


def stragglers_to_replace(job: Job) -> list[Straggler]:
    """The current attempt's stragglers waiting for a committed checkpoint to be moved (replace)."""
    progress = JobProgress.from_json(job.progress)
    if progress.pace is None or progress.pace.get("attempt") != job.attempt:
        return []
    return [s for s in progress.stragglers or [] if s.get("replace") == "pending" and s.get("node_rank") is not None]


def mark_replace(job: Job, ranks: list[int], outcome: str) -> None:
    """Record on the job's stragglers what became of their replacement ("replaced", or why not)."""
    progress = JobProgress.from_json(job.progress)
    for entry in progress.stragglers or []:
        if entry["rank"] in ranks:
            entry["replace"] = outcome
    job.progress = progress.to_json()
    Job.objects.filter(pk=job.pk).update(progress=job.progress)
