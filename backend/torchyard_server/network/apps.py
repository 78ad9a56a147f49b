from django.apps import AppConfig


class NetworkConfig(AppConfig):
    """Seed 000's TransformerLab routes (`/api/network/*`), aliases over the other apps' services.
    Nothing imports this app: it sits on top of them all."""

    name = "torchyard_server.network"
    label = "network"
