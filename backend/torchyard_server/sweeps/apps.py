from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "torchyard_server.sweeps"
    label = "sweeps"

    def ready(self) -> None:
        from ..jobs.registries import job_end_listeners
        from . import hooks

        # A trial's job ending moves its sweep on at once (the beat's tick is the fallback).
        job_end_listeners.register(hooks.TrialEnded())
