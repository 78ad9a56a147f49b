"""The Reference pages, generated from the code at build time (an MkDocs hook, `hooks:` in mkdocs.yml).

A reference page is a Markdown file in docs/reference/ with its own introduction and a marker,
`<!-- reference: NAME -->`, that this hook replaces with what it generates from the code:

- `cli`: the `torchyard` command line, from its argparse parser (workers/torchyard/cli.py);
- `rest-api`: the REST API, from the server's OpenAPI schema (drf-spectacular, as `make api-types`
  generates it), rendered to Markdown by essentials-openapi;
- `jobspec`: the JobSpec's sections and fields, from its typed value (dataclasses);
- `settings`: every environment variable the server's settings module reads, with the comment above it;
- `events`: the live streams' messages and the events they carry, from the stream contract (TypedDicts).

Where the code lives is named once, in the constants below: a module that moves is one line here.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import io
import json
import os
import re
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BACKEND = REPO / "backend"
WORKERS = REPO / "workers"

# Where each generated page's source is.
CLI_MODULE, CLI_PARSER = "torchyard.cli", "build_parser"
JOBSPEC_MODULE, JOBSPEC_CLASS = "torchyard_server.jobs.spec.jobspec", "JobSpec"
SETTINGS_FILES = (BACKEND / "torchyard_server" / "settings" / "__init__.py",
                  BACKEND / "torchyard_server" / "settings" / "env.py")
STREAM_CONTRACT_MODULE = "torchyard.stream_contract"
DJANGO_SETTINGS = "torchyard_server.settings"
# A schema file already generated from the code (relative to the repository), instead of generating it again.
OPENAPI_FILE_ENV = "TORCHYARD_DOCS_OPENAPI_FILE"

MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)

# The code's comments name the designs Torchyard grew from by their planning numbers; the site names
# the tools (docs/index.md, "Coming from another tool").
TOOL_NAMES = (
    (re.compile(r"\bseed[ _]?000\b('s)?", re.IGNORECASE), "TransformerLab"),
    (re.compile(r"\bseed[ _]?001\b('s)?", re.IGNORECASE), "the Rust coordinator"),
    (re.compile(r"\bseed[ _]?002\b('s)?", re.IGNORECASE), "Kubetorch"),
    (re.compile(r"\bseed[ _]?003\b('s)?", re.IGNORECASE), "DistroML"),
    (re.compile(r"\bseed[ _]?004\b('s)?", re.IGNORECASE), "the Go scheduler"),
)


def tool_names(text: str) -> str:
    for pattern, name in TOOL_NAMES:
        text = pattern.sub(lambda m, name=name: name + (m.group(1) or ""), text)
    return text


def cell(text: object) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(tool_names(str(text)).split()).replace("|", "\\|")


def code(text: object) -> str:
    # No escaping: a pipe inside a code span does not split a table's cell (Python-Markdown's tables).
    value = " ".join(str(text).split())
    fence = "``" if "`" in value else "`"
    pad = " " if "`" in value else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- setup ------------------------------------------------------------------------------------------
_django_ready = False


def _import_paths() -> None:
    for path in (str(BACKEND), str(WORKERS)):
        if path not in sys.path:
            sys.path.insert(0, path)


def _django() -> None:
    """Django set up as `make api-types` sets it up: no database is opened (SQLite in memory)."""
    global _django_ready
    if _django_ready:
        return
    _import_paths()
    import django
    from django.apps import apps

    if not apps.ready:
        os.environ["DJANGO_SETTINGS_MODULE"] = DJANGO_SETTINGS
        os.environ["DATABASE_URL"] = "sqlite:///:memory:"
        django.setup()
    _django_ready = True


# --- the CLI ----------------------------------------------------------------------------------------
def _option_names(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            names += " " + (action.metavar or (action.dest.upper() if not action.choices
                                               else "{" + ",".join(action.choices) + "}"))
        return code(names)
    return code(action.metavar or action.dest)


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS, False, []) or action.nargs == 0:
        return ""
    return code(action.default)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def cli_reference() -> str:
    _import_paths()
    module = importlib.import_module(CLI_MODULE)
    root: argparse.ArgumentParser = getattr(module, CLI_PARSER)()
    out: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: list[str], summary: str) -> None:
        subs = _subcommands(parser)
        if path:
            out.append(f"{'#' * min(len(path) + 1, 4)} `{' '.join(['torchyard', *path])}`\n")
            if summary:
                out.append(cell(summary[0].upper() + summary[1:]) + ".\n")
            if parser.description:
                out.append(cell(parser.description) + "\n")
            usage = parser.format_usage().removeprefix("usage: ").strip()
            out.append("```text\n" + " ".join(usage.split()) + "\n```\n")
            rows = [[_option_names(a), cell(a.help or ""), _default(a)] for a in parser._actions
                    if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]
            if rows:
                out.append(table(["argument", "what it is", "default"], rows) + "\n")
        if subs and not path:
            out.append(table(["command", "what it does"],
                             [[f"[`{name}`](#{'torchyard-' + name})", cell(help_text)] for name, help_text, _ in subs]) + "\n")
        for name, help_text, sub in subs:
            walk(sub, [*path, name], help_text)

    walk(root, [], root.description or "")
    return "\n".join(out)


# --- the REST API -----------------------------------------------------------------------------------
def openapi_schema() -> dict:
    """The server's OpenAPI schema, as `manage.py spectacular` writes it (the Makefile's SCHEMA_CMD), or
    the file OPENAPI_FILE_ENV names: `make lint` has just written and validated it."""
    given = os.environ.get(OPENAPI_FILE_ENV)
    if given:
        return json.loads((REPO / given).read_text())
    _django()
    from django.core.management import call_command

    buffer = io.StringIO()
    call_command("spectacular", format="openapi-json", stdout=buffer)
    return json.loads(buffer.getvalue())


def rest_api_reference() -> str:
    from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler

    rendered = OpenAPIV3DocumentationHandler(openapi_schema(), style="MKDOCS", source="openapi.json").write()
    # The page has its own title: the schema's becomes a line of text, every other heading stays.
    rendered = re.sub(r"^# (.+)$", r"**\1**", rendered, count=1, flags=re.MULTILINE)
    return tool_names(rendered)


# --- the JobSpec ------------------------------------------------------------------------------------
def _type_name(annotation: object) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text.replace("typing.", "")


def _field_default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return "" if f.default is None else code(json.dumps(f.default))
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "its section's defaults"
        return code(json.dumps(value))
    return ""


def jobspec_reference() -> str:
    _django()
    module = importlib.import_module(JOBSPEC_MODULE)
    top = getattr(module, JOBSPEC_CLASS)
    sections: list[tuple[str, type]] = []
    out: list[str] = []

    def fields_of(value: type) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(value) if f.name not in ("extra", "stored_null")]

    def rows(value: type, prefix: str) -> list[list[str]]:
        nested = getattr(value, "NESTED", {})
        found = []
        for f in fields_of(value):
            api = f.metadata.get("api", {})
            kind = nested.get(f.name)
            about = api.get("help_text", "")
            if kind is not None:
                inner = kind[0] if isinstance(kind, list) else kind
                sections.append((f"{prefix}{f.name}", inner))
                anchor = f"{prefix}{f.name}".replace(".", "")
                about = (about + "; " if about else "") + f"[its fields](#{anchor})"
            if api.get("choices"):
                about = (about + "; " if about else "") + "one of " + ", ".join(code(c) for c in api["choices"])
            found.append([code(f.name), code(_type_name(f.type)), _field_default(f), cell(about)])
        return found

    out.append(table(["field", "type", "default", "what it is"], rows(top, "")) + "\n")
    seen: set[str] = set()
    while sections:
        name, value = sections.pop(0)
        if name in seen:
            continue
        seen.add(name)
        out.append(f"## `{name}`\n")
        if value.__doc__ and not value.__doc__.startswith(value.__name__ + "("):
            out.append(cell(value.__doc__) + "\n")
        out.append(table(["field", "type", "default", "what it is"], rows(value, name + ".")) + "\n")
    return "\n".join(out)


# --- settings ---------------------------------------------------------------------------------------
ENV_READERS = {"env_str": "string", "env_bool": "boolean", "env_int": "integer", "env_float": "number",
               "env_list": "comma-separated list"}


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment lines right above line `lineno` (1-based), joined."""
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        text = lines[index].strip().lstrip("#").strip()
        if text.startswith("---"):
            break  # a section's title: what is above it is about something else
        found.insert(0, text)
        index -= 1
    return " ".join(found)


def _reads(node: ast.AST, source: str) -> Iterable[tuple[str, str, str, int]]:
    """(variable, kind, default source, line) for every environment variable read under `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ENV_READERS \
                and sub.args and isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, str):
            default = ast.get_source_segment(source, sub.args[1]) if len(sub.args) > 1 else ""
            yield sub.args[0].value, ENV_READERS[sub.func.id], default or "", sub.lineno
        # ("NAME", reader) pairs: the Rust coordinator's settings, read in a loop.
        if isinstance(sub, ast.Tuple) and len(sub.elts) == 2 and isinstance(sub.elts[0], ast.Constant) \
                and isinstance(sub.elts[0].value, str) and sub.elts[0].value.isupper():
            reader = sub.elts[1]
            if isinstance(reader, ast.Lambda) and isinstance(reader.body, ast.Call):
                reader = reader.body.func
            if isinstance(reader, ast.Name) and reader.id in ENV_READERS:
                yield sub.elts[0].value, ENV_READERS[reader.id], "", sub.lineno


def settings_reference() -> str:
    rows: dict[str, list[str]] = {}
    for path in SETTINGS_FILES:
        source = path.read_text()
        lines = source.splitlines()
        for statement in ast.walk(ast.parse(source)):
            if isinstance(statement, ast.FunctionDef):
                if statement.name in ENV_READERS or statement.name.startswith("_"):
                    continue
                # A function that reads settings (env.py's coordinator_store_url) says so in its docstring.
                about_statement = ast.get_docstring(statement) or ""
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr, ast.AugAssign)):
                about_statement = _comment_above(lines, statement.lineno)
            else:
                continue
            for name, kind, default, line in _reads(statement, source):
                if name in rows:
                    continue
                about = _trailing(lines[line - 1]) or _comment_above(lines, line) or about_statement
                rows[name] = [code(name), kind, code(default) if default else "", cell(about)]
    header = ["variable", "kind", "default", "what it is (the settings module's comment)"]
    return table(header, sorted(rows.values(), key=lambda row: row[0])) + "\n"


# --- the stream contract ----------------------------------------------------------------------------
def _contract_classes(source: str) -> dict[str, ast.ClassDef]:
    """The contract's TypedDicts, those that extend another of them (the events extend the envelope) included."""
    found: dict[str, ast.ClassDef] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") in ("TypedDict", *found) for b in node.bases):
            found[node.name] = node
    return found


def _trailing(line: str) -> str:
    """A line's own comment (`x: int  # what it is`): about that line alone, so it wins over the
    comment above, which may be about a group of lines."""
    match = re.search(r"\s#\s(.*)$", line)
    return match.group(1).strip() if match else ""


def _typed_dict(node: ast.ClassDef, source: str) -> str:
    lines = source.splitlines()
    rows = []
    for item in node.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        annotation = ast.get_source_segment(source, item.annotation) or ""
        required = not annotation.startswith("NotRequired[")
        if not required:
            annotation = annotation.removeprefix("NotRequired[").removesuffix("]")
        about = _trailing(lines[item.lineno - 1]) or _comment_above(lines, item.lineno)
        rows.append([code(item.target.id), code(annotation), "yes" if required else "no", cell(about)])
    doc = ast.get_docstring(node)
    text = f"### `{node.name}`\n\n" + (cell(doc) + "\n\n" if doc else "")
    return text + table(["field", "type", "always there", "what it is"], rows) + "\n"


def events_reference() -> str:
    _import_paths()
    contract = importlib.import_module(STREAM_CONTRACT_MODULE)
    source = Path(contract.__file__).read_text()
    classes = _contract_classes(source)
    lines = source.splitlines()
    tree = ast.parse(source)

    def constants(prefix: str) -> list[list[str]]:
        rows = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                    node.targets[0].id.startswith(prefix) and isinstance(node.value, ast.Constant):
                about = _trailing(lines[node.lineno - 1]) or _comment_above(lines, node.lineno)
                rows.append([code(node.value.value), code(node.targets[0].id), cell(about)])
        return rows

    def members(union: object) -> list[str]:
        return [member.__name__ for member in typing.get_args(union)]

    out = ["## Close codes\n", table(["code", "name", "what it means"], constants("CLOSE_")) + "\n"]
    message_types = [row for row in constants("") if not row[1].startswith("`CLOSE_")
                     and row[1] not in ("`ENVELOPE_COMPONENT`",)]
    out += ["## Message types\n", "Every message on a stream is one JSON object; its `type` is one of:\n",
            table(["type", "name", "what it is"], message_types) + "\n"]
    out += ["## The event envelope\n",
            "Every event, on the streams and the REST routes alike, is one flat object: the envelope's "
            "fields (" + ", ".join(code(name) for name in contract.EVENT_ENVELOPE) + "; the REST schema's "
            f"{code(contract.ENVELOPE_COMPONENT)}), then its type's own payload, below. `id` grows in the order "
            "events were accepted: it is the resume cursor (`?after=<id>`).\n"]
    done: set[str] = set()

    def section(title: str, names: Iterable[str]) -> None:
        out.append(f"## {title}\n")
        for name in names:
            if name in classes and name not in done:
                done.add(name)
                out.append(_typed_dict(classes[name], source))

    section("Events", members(contract.JobEvent))
    for route, union in contract.ROUTES.items():
        section(f"Messages of `{route}`", members(contract.NAMED_UNIONS[union]))
    section("Shapes inside them", list(classes))
    return tool_names("\n".join(out))


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "rest-api": rest_api_reference,
    "jobspec": jobspec_reference,
    "settings": settings_reference,
    "events": events_reference,
}


# --- MkDocs events ----------------------------------------------------------------------------------
def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    def generate(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: no reference generator named {name!r} "
                             f"(docs/hooks/reference.py has {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)
