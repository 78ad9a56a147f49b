from django.apps import AppConfig


class BundlesConfig(AppConfig):
    name = "torchyard_server.bundles"
    label = "bundles"
