from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "torchyard_server.web"
    label = "web"
