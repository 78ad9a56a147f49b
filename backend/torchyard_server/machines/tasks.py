from __future__ import annotations

from celery import shared_task
from torchyard import protocol

from ..celery import app as celery_app
from . import redis_acl
from .services import machines_due_a_health_check


@shared_task(name="torchyard_server.machines.tasks.sync_agent_redis_users")
def sync_agent_redis_users() -> dict[str, list[int]]:
    return redis_acl.sync_agent_users()


@shared_task(name="torchyard_server.machines.tasks.ask_health_checks")
def ask_health_checks() -> list[int]:
    """Ask each quarantined machine whose probation is over for a health check (its agent answers on
    /api/agent/health); returns the machines asked."""
    asked = []
    for machine in machines_due_a_health_check():
        celery_app.send_task(protocol.TASK_HEALTH_CHECK, queue=protocol.machine_queue(machine.pk))
        asked.append(machine.pk)
    return asked
