from __future__ import annotations

from celery import shared_task

from . import redis_acl


@shared_task(name="torchyard_server.machines.tasks.sync_agent_redis_users")
def sync_agent_redis_users() -> dict[str, list[int]]:
    return redis_acl.sync_agent_users()
