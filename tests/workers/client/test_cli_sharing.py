"""`torchyard queue`, `usage`, `priority` and run/submit's --priority and --time-limit: what the
command line sends and how it shows the server's answers (the server decides; the control plane's tests hold that)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console
from torchyard import cli
from torchyard.client import CliError
from torchyard.client.sharing import apply_queue_options, priority_arg, queue_table, series_table, usage_table


def render(table) -> str:
    console = Console(width=220, record=True)
    console.print(table)
    return console.export_text()


def test_priorities_pass_as_names_or_integers_and_nothing_else():
    assert (priority_arg("HIGH"), priority_arg(" low"), priority_arg("-5"), priority_arg("12")) == ("high", "low", -5, 12)
    with pytest.raises(CliError, match="low, normal, high or an integer"):
        priority_arg("urgent")


def test_run_and_submit_take_a_priority_and_a_time_limit_that_win_over_the_file():
    args = cli.build_parser().parse_args(["run", "--priority", "high", "--time-limit", "90m", "t.py", "--priority", "x"])
    assert (args.priority, args.time_limit, args.argv) == ("high", "90m", ["t.py", "--priority", "x"])
    submit = cli.build_parser().parse_args(["submit", "job.yaml", "--time_limit", "3600"])
    assert apply_queue_options({"priority": "low"}, priority=submit.priority, time_limit=submit.time_limit) == {
        "priority": "low", "time_limit": 3600}
    assert apply_queue_options({}, priority="7", time_limit=" 2h ") == {"priority": 7, "time_limit": "2h"}


def test_the_queue_table_shows_each_jobs_place_and_why_it_waits():
    now = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    answer = {"total": 3, "jobs": [
        {"id": 41, "name": "sweep", "project": "vision", "owner": "bob", "priority": 10, "position": 1, "head": True,
         "borrowing": False, "gpus": 4, "processes": 4, "reason": "waiting for 1 machines; first in line",
         "waiting_since": (now - timedelta(minutes=12)).isoformat()},
        {"id": 44, "name": "[bold]x", "project": "vision", "owner": "bob", "priority": 0, "position": 3, "head": False,
         "borrowing": True, "gpus": 0, "processes": 2, "reason": "project vision is at its quota",
         "waiting_since": (now - timedelta(seconds=30)).isoformat()}]}
    text = render(queue_table(answer, now))
    assert "2 queued job(s) you can see, 3 in the whole queue" in text
    assert "head waiting for 1 machines; first in line" in text and "12m" in text
    assert "[bold]x" in text and "2 proc" in text and "borrowing project vision is at its quota" in text


def test_usage_tables_give_hours_per_key_and_per_bucket():
    answer = {"by": "project", "since": "2025-06-01T00:00:00Z", "until": "2025-06-03T00:00:00Z", "bucket": "day",
              "totals": [{"key": "vision", "gpu_hours": 30.5, "process_hours": 61.0, "nodes": 4}],
              "buckets": ["2025-06-01T00:00:00Z", "2025-06-02T00:00:00Z"],
              "series": [{"key": "vision", "gpu_hours": [10.25, 20.25], "process_hours": [20.5, 40.5]}]}
    assert "vision" in render(usage_table(answer)) and "30.50" in render(usage_table(answer))
    by_day = render(series_table(answer))
    assert "2025-06-02 00:00" in by_day and "20.25" in by_day
