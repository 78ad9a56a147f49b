"""TransformerLab's routes (`/api/network/*`, `/api/tasks`), aliases over the other apps' services
with TransformerLab's payloads. A Django app (label `network`, as its tables were first named)."""
