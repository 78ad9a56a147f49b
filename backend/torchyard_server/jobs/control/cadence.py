"""What `checkpointing.every_n_steps: auto` needs from the control plane: how often the job's machines
fail (the SDK measures the other half, what a save costs, and picks the interval: Young/Daly,
torchyard.sdk.checkpoint.cadence).

A machine's fault rate is read from the nodes it ran over the last FAULT_WINDOW: a node lost (its
machine or agent went away) or failed without a Python exception of the user's (a killed process,
an OOM kill, a hang) is a fault of the cluster; a script's own exception is not. Few hours of history
say little, so each machine starts from a prior of one fault per PRIOR_MTBF of running (a Bayesian
estimate: (faults + 1) / (hours + prior)): a new cluster checkpoints as if machines failed about
daily, and the interval grows as they prove steadier. A job fails when any of its machines does: its
rate is the sum of theirs."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from torchyard.protocol import CheckpointCadence

from ..models import JobNode

PRIOR_MTBF_S = 24 * 3600.0
FAULT_WINDOW = timedelta(days=30)
N = JobNode.Status


def checkpoint_cadence(machine_ids: list[int], names: list[str]) -> CheckpointCadence:
    """The job's mean time between failures over `machine_ids` (its nodes' machines), and in words why."""
    since = timezone.now() - FAULT_WINDOW
    nodes = list(JobNode.objects.filter(machine_id__in=machine_ids, started_at__gte=since)
                 .values_list("machine_id", "status", "error", "started_at", "finished_at"))
    now = timezone.now()
    rate, faults, seconds = 0.0, 0, 0.0
    for machine_id in set(machine_ids):
        mine = [n for n in nodes if n[0] == machine_id]
        ran = sum(((finished or now) - started).total_seconds() for _, _, _, started, finished in mine)
        failed = sum(1 for _, status, error, _, _ in mine if status == N.LOST or (status == N.FAILED and not error))
        rate += (failed + 1) / (ran + PRIOR_MTBF_S)
        faults, seconds = faults + failed, seconds + ran
    mtbf = 1 / rate if rate else PRIOR_MTBF_S
    machines = ", ".join(sorted(set(names)))
    why = (f"{faults} fault(s) in {seconds / 3600:.1f} machine-hours on {machines} over the last "
           f"{FAULT_WINDOW.days} days, with a prior of one a day per machine")
    return {"mtbf_seconds": round(mtbf, 1), "why": why}


