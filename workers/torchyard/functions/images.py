"""The environment a function runs in, as Kubetorch's `kt.images` names it, on machines the team owns.

Torchyard runs no containers: every rank runs on its machine's own Python (the agent's `--python`)
with the torch installed there, in a cached virtual environment that adds the job's pip requirements
(`runtime.pip` and the project's requirements.txt). An `Image` therefore describes what to add to
that environment, never a filesystem to pull:

    image = ty.images.pytorch("24.08-py3").pip_install(["einops==0.8"]).env_vars({"OMP_NUM_THREADS": "1"})
    compute = ty.Compute(gpus=8, image=image)       # runtime.pip += einops==0.8, env += OMP_NUM_THREADS

- `pytorch(tag)`: the machines' own torch; the tag (NGC's "24.08-py3") is recorded, nothing installed.
- `ray(tag)` / `Ray(tag)`: Ray from pip, "2.32.0-py311" -> `ray[default]==2.32.0`.
- `python(version)`, `Python310()` ..., `debian()`, `ubuntu()`: the machines' Python as it is.

A tag naming a Python ("-py311", "3.12") must be the caller's own: the function is pickled here and
only loads on the same Python (major.minor). A container image's name is refused, saying so.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

# "-py311", "-py3" (NGC's "24.08-py3": any Python 3), "-py3.11" inside a tag.
_TAG_PYTHON = re.compile(r"(?:^|-)py(\d)\.?(\d*)(?=-|$)")
_VERSION = re.compile(r"^\d+(?:\.\d+){0,3}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RAY_PACKAGE = "ray[default]"  # the dashboard's packages too: plain `ray` has none
INSTEAD = ("Describe the environment instead: torchyard.images.pytorch() for the machines' own torch, "
           "torchyard.images.ray(\"2.32.0\") for Ray from pip, and .pip_install([...]) / .env_vars({...}) for the "
           "rest (or your project's requirements.txt).")


def _caller_python() -> tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def _check_python(what: str, major: int, minor: int | None) -> str | None:
    """The Python (major.minor) a tag names, refused unless it is the caller's: a function pickled on
    one Python loads only on the same one, and it runs on the machines whose Python is the caller's."""
    here = _caller_python()
    if major != here[0] or (minor is not None and minor != here[1]):
        named = f"{major}.{minor}" if minor is not None else str(major)
        raise ValueError(f"{what} names Python {named}, and this Python is {here[0]}.{here[1]}: Torchyard runs a "
                         f"function on the machines' own Python of the caller's version (it is pickled here and "
                         f"loads only there). Call it from Python {named}, or leave the Python out of the tag.")
    return f"{major}.{minor}" if minor is not None else None


def _tag_python(what: str, tag: str) -> str | None:
    match = _TAG_PYTHON.search(tag)
    if match is None:
        return None
    return _check_python(what, int(match.group(1)), int(match.group(2)) if match.group(2) else None)


@dataclass(frozen=True)
class Image:
    """What a function's environment adds to each machine's own Python: pip requirements and
    environment variables (Kubetorch's image builder, without a container). Each method returns a
    new Image, so chain them: `images.pytorch().pip_install(["einops"]).env_vars({"A": "1"})`.

    `image_id` (a container image) is refused, as are `python_path` and `install_cmd`: the agent's
    `--python` is the Python on each machine, and the agent installs the requirements itself."""

    name: str | None = None
    image_id: str | None = None
    python_path: str | None = None
    install_cmd: str | None = None
    tag: str | None = None  # the tag it was made from ("24.08-py3"), recorded
    python: str | None = None  # the Python (major.minor) the tag names, the caller's
    pip: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.image_id:
            raise ValueError(f"Image(image_id={self.image_id!r}): {refusal(self.image_id)}")
        if self.python_path:
            raise ValueError(f"Image(python_path={self.python_path!r}): the Python on each machine is its agent's "
                             "--python (or TORCHYARD_PYTHON); a job cannot choose another.")
        if self.install_cmd:
            raise ValueError(f"Image(install_cmd={self.install_cmd!r}): each agent installs the job's requirements "
                             "with pip into a cached virtual environment; give the packages to .pip_install([...]).")
        object.__setattr__(self, "pip", tuple(self.pip))
        object.__setattr__(self, "env", tuple((str(k), str(v)) for k, v in self.env))

    def pip_install(self, reqs: Iterable[str] | str, force: bool = False) -> Image:
        """This image with pip requirements added (`einops==0.8`, `pandas>=1.2`): the job's
        `runtime.pip`, installed once per machine into a cached virtual environment. Pip options
        (`--pre`, `--index-url`) go in the project's requirements.txt instead. `force` is accepted
        for Kubetorch's sake: an environment is made once per set of requirements."""
        added = [reqs] if isinstance(reqs, str) else list(reqs)
        for requirement in added:
            if not isinstance(requirement, str) or not requirement.strip():
                raise ValueError(f"pip_install: {requirement!r} is not a requirement such as 'einops==0.8'")
            if requirement.strip().startswith("-") or "\n" in requirement:
                raise ValueError(f"pip_install: {requirement!r}: pip options are not taken here; put them in your "
                                 "project's requirements.txt, which every machine installs with the job.")
        return replace(self, pip=tuple(dict.fromkeys([*self.pip, *(r.strip() for r in added)])))

    def env_vars(self, env_vars: Mapping[str, Any]) -> Image:
        """This image with environment variables set in every rank (the job's `env`; a Compute's own
        `env` wins over them). Values are taken as written: `$VAR` is not expanded."""
        for name in env_vars:
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ValueError(f"env_vars: {name!r} is not an environment variable name")
        return replace(self, env=(*((k, v) for k, v in self.env if k not in env_vars),
                                  *((k, str(v)) for k, v in env_vars.items())))

    set_env_vars = env_vars  # Kubetorch's name

    def from_docker(self, image_id: str) -> Image:
        """Refused: Torchyard runs no containers (the error says what to do instead)."""
        raise ValueError(f"Image.from_docker({image_id!r}): {refusal(image_id)}")

    def run_bash(self, command: str, force: bool = False) -> Image:
        """Refused: nothing is run on the machines to set them up; their owners install system
        software, and pip requirements go to `.pip_install`."""
        raise ValueError(f"Image.run_bash({command!r}): Torchyard runs no setup commands on the machines (they are "
                         "the team's, set up by their owners); give Python packages to .pip_install([...]) or your "
                         "project's requirements.txt.")


def refusal(name: str) -> str:
    """Why a container image cannot be used, and what to write instead."""
    return (f"{name!r} names a container image, and Torchyard runs no containers: a function runs on each "
            f"machine's own Python (its agent's --python) with the torch installed there. {INSTEAD}")


def check_image(image: object) -> None:
    """Compute(image=...): an Image, or None; a container image's name is refused."""
    if image is None or isinstance(image, Image):
        return
    if isinstance(image, str):
        raise ValueError(f"Compute(image={image!r}): {refusal(image)}")
    raise ValueError(f"Compute(image={image!r}): not a torchyard.images value. {INSTEAD}")


def pytorch(tag: str | None = None) -> Image:
    """The machines' own torch (nothing is installed). The tag, NGC's "24.08-py3" say, is recorded;
    a Python it names must be the caller's."""
    python = _tag_python(f"images.pytorch({tag!r})", tag) if tag else None
    return Image(name="pytorch", tag=tag, python=python)


def ray(tag: str | None = None) -> Image:
    """Ray from pip on every node: "2.32.0-py311" -> `ray[default]==2.32.0` in the job's requirements
    ("latest" or no tag: the newest Ray). A Python the tag names must be the caller's; what else the
    tag says ("-gpu", "-cu121") is the machines' own."""
    version = (tag or "latest").split("-", 1)[0]
    if version != "latest" and not _VERSION.match(version):
        raise ValueError(f"images.ray({tag!r}): a Ray version such as \"2.32.0\" or \"2.32.0-py311\"")
    python = _tag_python(f"images.ray({tag!r})", tag) if tag else None
    package = RAY_PACKAGE if version == "latest" else f"{RAY_PACKAGE}=={version}"
    return Image(name="ray", tag=tag, python=python, pip=(package,))


Ray = ray  # Kubetorch writes both


def python(version: str | None = None) -> Image:
    """The machines' Python as it is; `version` ("3.11"), when given, must be the caller's."""
    checked = None
    if version is not None:
        parts = str(version).split(".")
        if not (1 <= len(parts) <= 3 and all(p.isdigit() for p in parts)):
            raise ValueError(f"images.python({version!r}): a Python version such as \"3.11\"")
        checked = _check_python(f"images.python({version!r})", int(parts[0]), int(parts[1]) if len(parts) > 1 else None)
    return Image(name="python", tag=version, python=checked)


def Python310() -> Image:  # noqa: N802 - Kubetorch's names
    return python("3.10")


def Python311() -> Image:  # noqa: N802
    return python("3.11")


def Python312() -> Image:  # noqa: N802
    return python("3.12")


def debian() -> Image:
    """The machines' Python as it is (Kubetorch's minimal Debian image)."""
    return Image(name="debian")


def ubuntu() -> Image:
    """The machines' Python as it is (Kubetorch's Ubuntu image)."""
    return Image(name="ubuntu")


Debian = debian
Ubuntu = ubuntu

__all__ = ["Debian", "Image", "Python310", "Python311", "Python312", "Ray", "Ubuntu", "check_image", "debian",
           "python", "pytorch", "ray", "refusal", "ubuntu"]
