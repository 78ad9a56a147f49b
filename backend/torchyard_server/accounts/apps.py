from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "torchyard_server.accounts"
    label = "accounts"
