"""A job's history written by hand, second by second: queued for 101 s, an attempt that fetches its
code, builds its environment, trains, checkpoints at step 50, pauses for an evaluation, and loses a
node; the recovery resumes from step 50 in a second attempt, which is preempted after a checkpoint
at step 100; the third attempt finishes at step 150. Its goodput split is worked out by hand below
(EXPECTED); tests/reports/test_goodput.py computes it from these facts, test_goodput_api.py from the
same history as event rows."""

from __future__ import annotations

from torchyard_server.reports.goodput import Checkpoint, JobFacts, JobState, NodeState, PrepareLine, Progress

T0 = 1_780_000_000.0  # the submission, epoch seconds
END = 556.0

# (second, status, attempt, reason): the job's transitions.
JOB = [
    (0, "queued", 0, "submitted"),
    (100, "planning", 0, "its turn"),
    (101, "dispatching", 0, "launching 1 node(s), world size 2"),
    (150, "running", 0, "all 2 ranks running"),
    (300, "recovering", 0, "restart 1 of 3 after node rank 0 on m0: lost (no heartbeat for 10 s)"),
    (310, "queued", 0, "recovery: its machines cannot take it back, and #7 waits ahead of it in the queue"),
    (330, "planning", 0, "its turn"),
    (331, "dispatching", 1, "launching 1 node(s), world size 2, attempt 1, resuming from file:///ck/50/manifest.json"),
    (335, "running", 1, "all 2 ranks running"),
    (385, "preempting", 1, "preempted for #9 (priority high); checkpointing and yielding (grace 30 s)"),
    (390, "preempted", 1, "yielded after committing a checkpoint; waiting in the queue again"),
    (500, "planning", 1, "its turn"),
    (501, "dispatching", 2, "launching 1 node(s), world size 2, attempt 2, resuming from file:///ck/100/manifest.json"),
    (503, "running", 2, "all 2 ranks running"),
    (556, "completed", 2, "every node exited 0"),
]
# (second, node, attempt, status, reason): one node per attempt, named by its attempt.
NODES = [
    (101, 0, 0, "launching", "sent to m0"),
    (105, 0, 0, "preparing", "preparing code bundle 0123456789ab"),
    (146, 0, 0, "preparing", "preflight: waiting for every node"),
    (150, 0, 0, "running", "running"),
    (300, 0, 0, "lost", "no heartbeat for 10 s"),
    (331, 1, 1, "launching", "sent to m1"),
    (332, 1, 1, "preparing", "preparing code bundle 0123456789ab"),
    (335, 1, 1, "running", "running"),
    (390, 1, 1, "stopped", "yielded for preemption"),
    (501, 2, 2, "launching", "sent to m1"),
    (503, 2, 2, "running", "running"),
    (556, 2, 2, "completed", "exited 0"),
]
# (second, node, attempt, line): the preparation's lines.
LINES = [
    (115, 0, 0, "working directory from code bundle 0123456789ab in 0.20s (3 files, 2.0 KB: copied)"),
    (115, 0, 0, "creating environment 5e2f for 2 requirement(s)"),
    (130, 0, 0, "Collecting einops==0.8"),
    (145, 0, 0, "environment 5e2f ready in 30.0s"),
    (333, 1, 1, "working directory from code bundle 0123456789ab in 0.10s (3 files, 2.0 KB: reflinked)"),
    (333, 1, 1, "environment 5e2f is in this machine's cache"),
]
# (second, attempt, step): one a second, but 2 s held by the checkpoint at step 50 and a 30 s
# evaluation after step 80.
STEPS = ([(150 + k, 0, k) for k in range(1, 51)] + [(202 + k - 50, 0, k) for k in range(51, 81)]
         + [(263 + k - 81, 0, k) for k in range(81, 101)] + [(335 + k - 50, 1, k) for k in range(51, 101)]
         + [(503 + k - 100, 2, k) for k in range(101, 151)])
# (committed second, attempt, step, uri, blocking seconds)
CHECKPOINTS = [(202, 0, 50, "file:///ck/50/manifest.json", 2.0), (387, 1, 100, "file:///ck/100/manifest.json", 2.0)]

EXPECTED = {
    "queued": 101.0,  # 0 -> 101
    "preempted": 114.0,  # 387 -> 501: yielding after the checkpoint, waiting, planning
    "code_fetch": 11.0,  # 105 -> 115, 332 -> 333
    "environment_build": 30.0,  # 115 -> 145
    "launch": 14.0,  # 101 -> 105, 145 -> 150; 331 -> 332, 333 -> 335; 501 -> 503
    "training": 150.0,  # steps 1-50, 51-100 again, 101-150
    "checkpoint": 4.0,  # 200 -> 202, 385 -> 387
    "recovery": 31.0,  # 300 -> 331
    "lost_work": 50.0,  # steps 51-100 of attempt 0 (202 -> 282 less the 30 s evaluation)
    "hang": 18.0,  # the last step at 282 -> the node called lost at 300
    "idle": 33.0,  # the evaluation (30 s), after the last step until the job completed (3 s)
}
EXPECTED_ATTEMPTS = {
    0: {"queued": 101.0, "code_fetch": 10.0, "environment_build": 30.0, "launch": 9.0, "training": 50.0,
        "checkpoint": 2.0, "recovery": 31.0, "lost_work": 50.0, "hang": 18.0, "idle": 30.0},
    1: {"preempted": 114.0, "code_fetch": 1.0, "launch": 3.0, "training": 50.0, "checkpoint": 2.0},
    2: {"launch": 2.0, "training": 50.0, "idle": 3.0},
}
ATTEMPT_SPANS = {0: (0.0, 331.0), 1: (331.0, 501.0), 2: (501.0, 556.0)}


def facts() -> JobFacts:
    return JobFacts(
        created=T0, end=T0 + END, status="completed",
        states=[JobState(T0 + s, status, attempt, reason) for s, status, attempt, reason in JOB],
        node_states=[NodeState(T0 + s, node, attempt, status, reason) for s, node, attempt, status, reason in NODES],
        prepare=[PrepareLine(T0 + s, node, attempt, line) for s, node, attempt, line in LINES],
        progress=[Progress(T0 + s, attempt, step) for s, attempt, step in STEPS],
        checkpoints=[Checkpoint(attempt, step, uri, T0 + s, blocking) for s, attempt, step, uri, blocking in CHECKPOINTS],
    )
