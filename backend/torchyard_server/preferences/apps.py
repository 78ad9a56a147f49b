from django.apps import AppConfig


class PreferencesConfig(AppConfig):
    name = "torchyard_server.preferences"
    label = "preferences"
