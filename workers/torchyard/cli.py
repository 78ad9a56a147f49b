"""The `torchyard` command: run an agent on a machine, or talk to a server's API from a shell.

    torchyard agent --server http://HOST:8000 --token TOKEN
    torchyard submit spec.json [--follow]          (server and API token from flags or env)
    torchyard jobs | machines | logs JOB [--follow] | stop JOB

API commands read TORCHYARD_SERVER and TORCHYARD_TOKEN (get a token with `torchyard token`).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


class CliError(Exception):
    pass


# --- agent ----------------------------------------------------------------------------------------
def cmd_agent(args: argparse.Namespace) -> int:
    from torchyard import protocol
    from torchyard.agent.main import Agent, AgentError, fetch_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = args.token or os.environ.get("TORCHYARD_MACHINE_TOKEN", "")
    token_file = args.token_file or os.environ.get("TORCHYARD_MACHINE_TOKEN_FILE")
    if not token and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise CliError(f"--token-file: {exc}") from None
    try:
        machine_id, _ = protocol.parse_machine_token(token)
    except ValueError as exc:
        raise CliError(f"--token: {exc}") from None
    redis_url = args.redis_url
    if not redis_url:
        if not args.server:
            raise CliError("give --server URL (or --redis-url URL)")
        try:
            redis_url = fetch_config(args.server, token)["redis_url"]
        except AgentError as exc:
            raise CliError(str(exc)) from None
    work_dir = Path(args.work_dir or Path.home() / ".torchyard" / f"agent-{machine_id}").resolve()
    Agent(token=token, redis_url=redis_url, work_dir=work_dir, concurrency=args.concurrency).run()
    return 0


# --- API client -----------------------------------------------------------------------------------
def _server(args: argparse.Namespace) -> str:
    return (args.server or os.environ.get("TORCHYARD_SERVER") or "http://127.0.0.1:8000").rstrip("/")


def _api(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    server = _server(args)
    token = args.api_token or os.environ.get("TORCHYARD_TOKEN")
    if not token:
        raise CliError("no API token: pass --api-token or set TORCHYARD_TOKEN (see `torchyard token`)")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server + path, data=data, method=method, headers={
        "Authorization": f"Token {token}", "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        with contextlib.suppress(ValueError):
            detail = _format_errors(json.loads(detail))
        raise CliError(f"{method} {path}: HTTP {exc.code}\n{detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CliError(f"cannot reach {server}: {exc}") from None


def _format_errors(errors: Any, prefix: str = "") -> str:
    if isinstance(errors, dict):
        return "\n".join(_format_errors(v, f"{prefix}{k}." if k != "detail" else prefix) for k, v in errors.items())
    if isinstance(errors, list):
        return "\n".join(_format_errors(v, prefix) for v in errors)
    return f"  {prefix.rstrip('.') or 'error'}: {errors}"


def cmd_token(args: argparse.Namespace) -> int:
    server = _server(args)
    username = args.username or input("username: ")
    password = os.environ.get("TORCHYARD_PASSWORD") or getpass.getpass("password: ")
    request = urllib.request.Request(server + "/api/auth/token", method="POST",
                                     data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(json.load(response)["token"])
    except urllib.error.HTTPError as exc:
        raise CliError(f"login failed: HTTP {exc.code}") from None
    return 0


def _print_job(job: dict[str, Any]) -> None:
    progress = job.get("progress") or {}
    step = progress.get("step")
    total = progress.get("total_steps")
    where = f"step {step}/{total}" if step is not None else ""
    print(f"#{job['id']:<5} {job['status']:<12} {job['name'][:40]:<40} world={job.get('world_size') or '-':<4} {where}")


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        spec = json.loads(Path(args.spec).read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"{args.spec}: {exc}") from None
    job = _api(args, "POST", "/api/jobs", spec)
    _print_job(job)
    if args.follow:
        return _follow(args, job["id"])
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    for job in _api(args, "GET", "/api/jobs"):
        _print_job(job)
    return 0


def cmd_machines(args: argparse.Namespace) -> int:
    for m in _api(args, "GET", "/api/machines"):
        caps = m.get("capabilities") or {}
        print(f"{m['id']:<4} {m['name']:<20} {m['status']:<8} {m['host']}:{m['port']}  "
              f"cpus={caps.get('cpu_count', '-')} gpus={caps.get('gpu_count', 0)}")
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    for recipe in _api(args, "GET", "/api/recipes"):
        print(f"{recipe['entrypoint']:<24} {recipe['summary']}")
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    checkpoints = _api(args, "GET", f"/api/jobs/{args.job}/checkpoints")
    if not checkpoints:
        print(f"job {args.job} has no committed checkpoint")
    for c in checkpoints:
        print(f"step {c['step']:<8} attempt {c['attempt']:<3} world {c['world_size']:<4} "
              f"{c['total_bytes'] / 1e6:9.1f} MB  {len(c['files'])} file(s)  {c['uri']}")
    return 0


def _follow(args: argparse.Namespace, job_id: int) -> int:
    after = 0
    final = {"completed": 0, "failed": 1, "stopped": 1}
    while True:
        page = _api(args, "GET", f"/api/jobs/{job_id}/events?after={after}&type=log,state")
        for event in page["events"]:
            if event["type"] == "log":
                print(f"[rank {event.get('rank')}] {event.get('line')}")
            elif event.get("scope") == "job":
                print(f"== job {event['status']}: {event.get('reason', '')}")
        after = page["next_after"]
        job = _api(args, "GET", f"/api/jobs/{job_id}")
        if job["status"] in final and not page["events"]:
            return final[job["status"]]
        time.sleep(1.0)


def cmd_logs(args: argparse.Namespace) -> int:
    if args.follow:
        return _follow(args, args.job)
    page = _api(args, "GET", f"/api/jobs/{args.job}/logs?limit=10000")
    for event in page["events"]:
        print(f"[rank {event.get('rank')}] {event.get('line')}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    _print_job(_api(args, "POST", f"/api/jobs/{args.job}/stop"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchyard", description="Torchyard: distributed PyTorch on your machines.")
    sub = parser.add_subparsers(dest="command", required=True)

    agent = sub.add_parser("agent", help="run this machine's agent")
    agent.add_argument("--server", help="the Torchyard server URL (asks it for the Redis URL)")
    agent.add_argument("--token", help="the machine token from `POST /api/machines` (or TORCHYARD_MACHINE_TOKEN)")
    agent.add_argument("--token-file", help="read the machine token from this file (or TORCHYARD_MACHINE_TOKEN_FILE)")
    agent.add_argument("--redis-url", help="connect to this Redis directly instead of asking the server")
    agent.add_argument("--work-dir", help="where run directories live (default ~/.torchyard/agent-<id>)")
    agent.add_argument("--concurrency", type=int, default=4)
    agent.set_defaults(func=cmd_agent)

    def api_command(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--server", help="server URL (default $TORCHYARD_SERVER or http://127.0.0.1:8000)")
        p.add_argument("--api-token", help="API token (default $TORCHYARD_TOKEN)")
        p.set_defaults(func=func)
        return p

    token = api_command("token", cmd_token, "log in and print an API token")
    token.add_argument("--username")
    submit = api_command("submit", cmd_submit, "submit a JobSpec (JSON file)")
    submit.add_argument("spec")
    submit.add_argument("--follow", action="store_true", help="stream logs until the job ends")
    api_command("jobs", cmd_jobs, "list jobs")
    api_command("machines", cmd_machines, "list machines")
    api_command("recipes", cmd_recipes, "list the built-in recipes a job can run")
    checkpoints = api_command("checkpoints", cmd_checkpoints, "list a job's committed checkpoints, newest first")
    checkpoints.add_argument("job", type=int)
    logs = api_command("logs", cmd_logs, "print a job's logs")
    logs.add_argument("job", type=int)
    logs.add_argument("--follow", action="store_true")
    stop = api_command("stop", cmd_stop, "stop a job")
    stop.add_argument("job", type=int)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"torchyard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
