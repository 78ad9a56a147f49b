"""Rows the control plane's tests start from, built through the services that make them in production."""

from __future__ import annotations

from torchyard_server.machines.services import machine_create, machine_record_heartbeat


def bring_online(name: str, *, gpus: list[dict] | None = None, cpu_count: int = 4):
    """Register a machine and apply one heartbeat, as its agent's first report would."""
    machine, token = machine_create(name=name, host=f"10.9.0.{abs(hash(name)) % 200 + 1}")
    machine_record_heartbeat(
        event={
            "machine": machine.pk,
            "token": token,
            "agent_version": "test",
            "capabilities": {
                "cpu_count": cpu_count,
                "memory": 8 << 30,
                "disk_space": 100 << 30,
                "gpu_count": len(gpus or []),
                "gpu_memory": sum(g["memory_mb"] for g in gpus or []),
                "gpus": gpus or [],
            },
            "load": {"cpu_usage": 1.0, "memory_usage": 10.0, "gpu_usage": []},
        }
    )
    machine.refresh_from_db()
    return machine, token
