from django.apps import AppConfig


class TransformerLabConfig(AppConfig):
    """TransformerLab's routes (`/api/network/*`, `/api/tasks`), aliases over the other apps' services.
    Nothing imports this app: it sits on top of them all."""

    name = "torchyard_server.compat.transformerlab"
    # The label its tables and migrations were first made under (network_rankdispatch).
    label = "network"
