"""Seed 001's REST API (the fault-tolerant runtime's `/health`, `/jobs`, ...) at its own root paths,
over the canonical `/api/` views. Nothing imports this package: it sits on top of the apps."""
