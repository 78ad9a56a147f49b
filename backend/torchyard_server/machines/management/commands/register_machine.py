from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_create, machine_rotate_token


class Command(BaseCommand):
    help = "Register a machine (or issue a new token for an existing one) and write its agent token."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--host", required=True, help="address other nodes reach this machine at")
        parser.add_argument("--token-file", help="write the token here (mode 0600) instead of printing it")

    def handle(self, *args, name, host, token_file=None, **options):
        machine = Machine.objects.filter(name=name).first()
        if machine is None:
            machine, token = machine_create(name=name, host=host)
        else:
            if machine.host != host:
                Machine.objects.filter(pk=machine.pk).update(host=host)
            token = machine_rotate_token(machine=machine)
        if token_file:
            path = Path(token_file)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(token)
                path.chmod(0o600)
            except OSError as exc:
                raise CommandError(f"cannot write {path}: {exc}") from exc
            self.stdout.write(f"machine {name} (id {machine.pk}): token written to {path}")
        else:
            self.stdout.write(token)
