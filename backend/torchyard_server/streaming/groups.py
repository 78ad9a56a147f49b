"""Channel-layer group names, in one place."""

CLUSTER = "cluster"


def job_group(job_id: int) -> str:
    return f"job.{job_id}"
