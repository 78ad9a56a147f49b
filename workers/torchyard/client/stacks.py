"""`torchyard stacks JOB`: every rank's Python stack at this moment, for a job that looks slow rather
than dead. The server asks each running node's agent, which reads its ranks from outside (py-spy);
the answers arrive as the job's `stacks` events, one per node."""

from __future__ import annotations

import time

from rich.console import Console

from ..protocol import StacksRequested
from ..stream_contract import StacksEvent
from . import CliError
from .http import ApiClient

POLL_S = 0.5


def collect(api: ApiClient, job: int, timeout: float) -> tuple[StacksRequested, list[StacksEvent]]:
    """Ask, then wait up to `timeout` s for every node's answer; (what was asked, the answers)."""
    asked = api.call("POST", f"/api/jobs/{job}/stacks")
    wanted = {node["node_rank"] for node in asked["nodes"]}
    answers: dict[int, StacksEvent] = {}
    after, deadline = 0, time.monotonic() + timeout
    while wanted - answers.keys() and time.monotonic() < deadline:
        page = api.call("GET", f"/api/jobs/{job}/events?type=stacks&after={after}")
        for event in page["events"]:
            after = max(after, event["id"])
            if event.get("request") == asked["request"]:
                answers[event["node_rank"]] = event
        if not page["events"]:
            time.sleep(POLL_S)
    return asked, [answers[rank] for rank in sorted(answers)]


def show_stacks(api: ApiClient, job: int, console: Console, timeout: float = 30.0) -> int:
    asked, answers = collect(api, job, timeout)
    ranks = sorted((rank for node in answers for rank in node["ranks"]), key=lambda r: r["rank"])
    node_of = {rank["rank"]: node for node in answers for rank in node["ranks"]}
    console.print(f"job {job}: {len(ranks)} rank(s) on {len(answers)} node(s), read from outside with py-spy",
                  highlight=False)
    for rank in ranks:
        node = node_of[rank["rank"]]
        where = (f", waits in {rank['waits_in']}" if rank.get("waits_in")
                 else f", in {rank['frame']}" if rank.get("frame") else "")
        console.print(f"\n== rank {rank['rank']} · node {node['node_rank']} on {node.get('hostname') or '?'} "
                      f"(pid {rank['pid']}, {rank['process_state']}){where}", markup=False, highlight=False,
                      soft_wrap=True)
        console.print(rank["stack"].rstrip() or "(no stack)", markup=False, highlight=False)
    missing = sorted({n["node_rank"] for n in asked["nodes"]} - {a["node_rank"] for a in answers})
    if missing:
        names = {n["node_rank"]: n["machine"] for n in asked["nodes"]}
        raise CliError("no answer within {:g} s from node(s) {}".format(
            timeout, ", ".join(f"{rank} ({names[rank]})" for rank in missing)))
    return 0
