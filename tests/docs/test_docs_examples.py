"""The documentation's own checks (no stack needed): every shell and Python example is either run by
tests/integration/test_docs_examples.py or says why not, the README stays a front door, the pages
name the tools Torchyard is compatible with rather than their planning numbers, and the Reference
pages can be generated from the code as it is."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from .examples import CHECKED, DOCS, README, ROOT, RUNNABLE, documents, examples

# Each runnable example costs the integration tier a few seconds: a handful, chosen for what they show.
MOST_RUNNABLE = 10
README_LINES = (100, 170)


def test_every_shell_and_python_example_is_run_or_says_why_not():
    unmarked = [f"{e.where} ({e.language}): the line above it is {e.marker!r}" for e in examples()
                if e.language in CHECKED and e.run is None and e.reason is None]
    assert not unmarked, ("put <!-- run: NAME --> (tests/integration/test_docs_examples.py runs it) or "
                          "<!-- not-run: REASON --> on the line above each of:\n" + "\n".join(unmarked))


def test_every_not_run_example_gives_a_reason():
    vague = [e.where for e in examples() if e.reason is not None and len(e.reason) < 15]
    assert not vague, f"say why these are not run: {vague}"


def test_every_fenced_block_names_its_language():
    # An unlabelled block could hold a shell command that nothing checks.
    bare = [e.where for e in examples() if not e.language]
    assert not bare, f"name the language of (```text for output or routes): {bare}"


def test_runnable_examples_are_few_uniquely_named_and_of_a_language_the_runner_runs():
    runnable = [e for e in examples() if e.run is not None]
    names = [e.run for e in runnable]
    assert len(names) == len(set(names)), f"two examples share a name: {names}"
    assert [e.where for e in runnable if e.language not in RUNNABLE] == []
    assert 1 <= len(runnable) <= MOST_RUNNABLE, (
        f"{len(runnable)} runnable examples: the integration tier has room for about {MOST_RUNNABLE}; mark the "
        "others not-run with a reason")


def test_markers_sit_only_above_examples():
    # A marker above prose (a block that moved away) would mark nothing.
    stray = []
    for path in documents():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if re.match(r"^\s*<!--\s*(run|not-run):", line):
                below = next((rest.strip() for rest in lines[number:] if rest.strip()), "")
                if not re.match(r"^(`{3,}|~{3,})", below):
                    stray.append(f"{path.relative_to(ROOT)}:{number}")
    assert not stray, f"markers with no example below them: {stray}"


def test_the_readme_is_a_front_door_linking_into_the_docs():
    text = README.read_text()
    lines = text.splitlines()
    assert README_LINES[0] <= len(lines) <= README_LINES[1], (
        f"README.md has {len(lines)} lines: keep it a front door and move the manual into docs/")
    assert "make run" in text and "make test" in text
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "README.md links into docs/"
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"README.md links to pages that are not there: {missing}"


def test_user_facing_text_names_tools_not_planning_numbers():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in documents()
             for number, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"seed 0", line, re.I)]
    assert not found, "name the tool (TransformerLab, the Rust coordinator, ...):\n" + "\n".join(found)


@pytest.fixture(scope="module")
def reference():
    """docs/hooks/reference.py, the MkDocs hook that generates the Reference pages."""
    spec = importlib.util.spec_from_file_location("torchyard_docs_reference", DOCS / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_command(reference):
    from torchyard.cli import build_parser

    text = reference.cli_reference()
    commands = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert all(f"## `torchyard {name}`" in text for name in commands)
    assert "`--nnodes N|MIN:MAX`" in text and "`torchyard token create`" in text


def test_the_jobspec_reference_has_every_section(reference):
    text = reference.jobspec_reference()
    for section in ("resources", "fault_tolerance", "compression", "volumes", "preemption"):
        assert f"## `{section}`" in text
    assert "`min_gpu_memory`" in text and "MB per GPU" in text


def test_the_settings_reference_reads_the_settings_module(reference):
    text = reference.settings_reference()
    for name in ("DATABASE_URL", "REDIS_URL", "TORCHYARD_STORAGE_URL", "TORCHYARD_METRICS_TOKEN", "WORLD_SIZE"):
        assert f"`{name}`" in text
    assert not re.search(r"seed 0", text, re.I)


def test_the_events_reference_has_every_event_and_close_code(reference):
    from torchyard import stream_contract

    text = reference.events_reference()
    for member in (*stream_contract.JobEvent.__args__, stream_contract.EventsFrame):
        assert f"### `{member.__name__}`" in text
    for code in stream_contract.CLOSE_CODES:
        assert f"`{code}`" in text
