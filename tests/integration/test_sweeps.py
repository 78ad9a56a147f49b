"""A sweep on the real stack: 12 trials of the built-in MLP recipe searched by ASHA over its learning rate
and width, each trial a job of the queue, 4 at a time; the metric is the loss the recipe reports every
step. The best trial is the one whose last loss is lowest, trials behind at a rung are pruned (their
jobs stopped, the comparison said), and never more than 4 trials run at once. Then a sweep stopped
mid-way and resumed: the stopped trials' points run again and it completes."""

from __future__ import annotations

from datetime import datetime

from playwright.sync_api import expect

from .browser import fresh_page, log_in

FINAL = {"completed", "stopped", "failed"}
TRIAL = {"entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": 1, "procs_per_node": 1},
         "args": ["--steps", "60", "--report-every", "1", "--log-every", "1000", "--step-sleep", "0.1"],
         "checkpointing": {"enabled": False}}
SWEEP = {
    "name": "lr-search", "trial": TRIAL,
    "space": {"lr": {"loguniform": [1.0e-4, 0.3]}, "hidden": {"choice": [16, 64]}},
    "searcher": {"name": "asha", "metric": "loss", "mode": "min", "max_trials": 12, "max_concurrent": 4,
                 "min_steps": 5, "reduction_factor": 3, "seed": 7},
}


def wait_sweep(stack, sweep_id: int, statuses: set[str], timeout: float = 300) -> dict:
    found: dict = {}

    def reached() -> bool:
        found.update(stack.api("GET", f"/api/sweeps/{sweep_id}").json())
        return found["status"] in statuses

    # A sweep moves on as its trials' jobs change state: listen to the cluster's job events.
    assert stack.watch_cluster(reached, timeout), found
    return found


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_an_asha_sweep_prunes_behind_the_rungs_and_names_the_best_trial(pg_stack, browser, shots):
    created = pg_stack.api("POST", "/api/sweeps", json=SWEEP)
    assert created.status_code == 201, created.text
    sweep = wait_sweep(pg_stack, created.json()["id"], FINAL)
    assert sweep["status"] == "completed", sweep
    trials = sweep["trials"]
    counts = sweep["counts"]
    assert len(trials) == 12 and counts["completed"] + counts["pruned"] == 12, counts
    # The best is the completed trial with the lowest last loss (of two with the same point, and so the
    # same loss, the first).
    completed = [t for t in trials if t["status"] == "completed"]
    best = min(completed, key=lambda t: (t["value"], t["number"]))
    assert sweep["best_trial"] == {"number": best["number"], "job": best["job"],
                                   "hyperparameters": best["params"], "metric": best["value"]}
    # Pruned at a rung (step 5 or 15), its job stopped there, and why.
    pruned = [t for t in trials if t["status"] == "pruned"]
    assert pruned, trials
    for trial in pruned:
        assert trial["reason"].startswith(f"pruned at step {trial['step']} (loss ") and "trials that reached it go on" \
            in trial["reason"], trial
        job = pg_stack.job(trial["job"])
        assert job["status"] == "stopped" and job["status_reason"].startswith("pruned by sweep lr-search"), job
        assert trial["step"] < 60
    # Each trial's hyperparameters reached its job, and the job ran with them.
    for trial in trials:
        assert pg_stack.job(trial["job"])["spec"]["hyperparameters"] == trial["params"]
    # Never more than max_concurrent at once: a trial is asked when another has ended.
    edges = sorted([(_ts(t["created_at"]), 1) for t in trials] + [(_ts(t["finished_at"]), -1) for t in trials])
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    assert peak <= 4, edges

    # Its page, in Chromium: how far it got, the best trial, every trial with why the pruned ones stopped.
    with fresh_page(browser, shots, 1280, 1400) as page:
        log_in(pg_stack.base, page)
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Sweeps").click()
        page.get_by_role("link", name=f"#{sweep['id']} lr-search").click()
        expect(page.get_by_text("12 / 12 trials done")).to_be_visible()
        best_box = page.get_by_label("best trial")
        expect(best_box.get_by_role("link", name=f"job #{best['job']}")).to_be_visible()
        trials_table = page.get_by_role("table")
        expect(trials_table.get_by_role("row")).to_have_count(13)
        expect(trials_table.get_by_text("pruned at step").first).to_be_visible()
        expect(page.locator(".chart-uplot canvas").first).to_be_visible()  # the curves load after the page
        page.screenshot(path=str(shots / "sweep.png"), full_page=True)


def test_a_sweep_stopped_mid_way_resumes_where_it_was(pg_stack):
    spec = {**SWEEP, "name": "stop-resume",
            "trial": {**TRIAL, "args": ["--steps", "60", "--report-every", "1", "--step-sleep", "0.15"]},
            "searcher": {**SWEEP["searcher"], "name": "random", "max_trials": 4, "max_concurrent": 2}}
    sweep_id = pg_stack.api("POST", "/api/sweeps", json=spec).json()["id"]

    def both_training() -> bool:
        trials = pg_stack.api("GET", f"/api/sweeps/{sweep_id}").json()["trials"]
        return len(trials) == 2 and all(t["step"] for t in trials)

    assert pg_stack.watch_cluster(both_training, 120)
    stopping = pg_stack.api("POST", f"/api/sweeps/{sweep_id}/stop")
    assert stopping.status_code == 202, stopping.text
    stopped = wait_sweep(pg_stack, sweep_id, {"stopped"}, timeout=60)
    points = sorted(str(t["params"]) for t in stopped["trials"])
    assert [t["status"] for t in stopped["trials"]] == ["stopped", "stopped"]
    assert all(pg_stack.job(t["job"])["status"] == "stopped" for t in stopped["trials"])

    resumed = pg_stack.api("POST", f"/api/sweeps/{sweep_id}/resume")
    assert resumed.status_code == 202 and resumed.json()["status"] == "running", resumed.text
    done = wait_sweep(pg_stack, sweep_id, FINAL)
    assert done["status"] == "completed", done
    again = [t for t in done["trials"] if t["status"] != "stopped"]
    assert len(again) == 4 and points == sorted(str(t["params"]) for t in again[:2]), done["trials"]
    assert pg_stack.wait_no_job_processes(again[-1]["job"]) == []
