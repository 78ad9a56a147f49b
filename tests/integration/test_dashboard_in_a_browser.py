"""The dashboard as a person uses it, in Debian's headless Chromium driven by Playwright: log in,
see both machines, launch the demo job from the form with Plan then Launch, and watch it train to
completion; see a running job's nodes on their machines on the topology page and open the job from
there; follow a 2-node job on its page at 1280x800 to its end (per-node progress, the loss chart, the
timeline, the log's search); see a killed rank's recovery on the timeline; stop a job with "Stop all
nodes"; compare two runs on the experiments page; see a job queued behind a busy cluster on the queue
page with its reason, change its priority there, and its hours on the usage page after it ran; a
job preempted by a higher-priority one on its timeline. Every page visited is saved as a screenshot
under var/screenshots/<test>/."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from .browser import fresh_page, log_in
from .stack import ADMIN


@pytest.fixture(scope="module")
def stack(embedded_stack):
    return embedded_stack  # the shared one (conftest.py)


@pytest.fixture
def page(browser, shots):
    with fresh_page(browser, shots, 1440, 900) as page:
        yield page


def test_a_user_logs_in_launches_the_demo_job_and_watches_it_complete(stack, page, shots):
    page.goto(stack.base + "/jobs")
    expect(page).to_have_url(re.compile(r"/login"))
    page.fill("input[name=password]", "wrong")
    page.fill("input[name=username]", ADMIN[0])
    page.click("button[type=submit]")
    expect(page.get_by_text(re.compile("wrong username or password", re.I))).to_be_visible()

    page.fill("input[name=password]", ADMIN[1])
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs$"))
    page.goto(stack.base + "/")
    for name in ("local-0", "local-1"):
        expect(page.get_by_role("row", name=re.compile(name))).to_contain_text("online")

    page.get_by_role("button", name="New job").click()
    form = page.get_by_role("form", name="New job")
    form.locator("input[name=name]").fill("browser-demo")
    expect(form.get_by_label("Plugin")).to_have_value(re.compile("mlp_ddp"))
    form.get_by_role("switch", name=re.compile("Distributed training")).check()
    form.locator("input[name=nodes]").fill("2")
    form.locator("input[name=procs_per_node]").fill("1")
    form.locator("input[name=steps]").fill("120")
    form.get_by_role("button", name="Plan").click()

    # The plan comes first: both machines, one rank each, the master marked; Launch starts exactly that.
    plan = form.get_by_role("region", name="Execution plan")
    expect(plan.get_by_role("table", name="Nodes").locator("tbody tr")).to_have_count(2, timeout=15_000)
    expect(plan).to_contain_text("2 processes on 2 machines")
    expect(plan.get_by_text("master", exact=True)).to_have_count(1)
    page.screenshot(path=str(shots / "new-job-plan.png"), full_page=True)
    plan.get_by_role("button", name="Launch").click()

    # Launching opens the new job's page.
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=15_000)
    job_id = int(page.url.rsplit("/", 1)[-1])

    expect(page.locator(".badge, [class*=badge]").filter(has_text="completed").first).to_be_visible(timeout=120_000)
    logs = page.locator("text=/\\[rank 1\\]/").first
    expect(logs).to_be_visible()
    expect(page.get_by_text(re.compile(r"rank 0: done at step 120"))).to_be_visible()
    page.screenshot(path=str(shots / "job.png"), full_page=True)
    assert stack.wait_no_job_processes(job_id) == []


def test_bad_input_in_the_form_shows_the_field_error(stack, page):
    page.goto(stack.base + "/login")
    page.fill("input[name=username]", ADMIN[0])
    page.fill("input[name=password]", ADMIN[1])
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login"), timeout=15_000)
    page.get_by_role("button", name="New job").click()
    form = page.get_by_role("form", name="New job")
    form.locator("input[name=name]").fill("too-big")
    form.get_by_role("switch", name=re.compile("Distributed training")).check()
    form.locator("input[name=nodes]").fill("5")
    form.get_by_role("button", name="Plan").click()
    refusal = form.get_by_role("region", name="Plan refused")
    # A loaded CI machine can take longer than expect()'s default 5 s to plan.
    expect(refusal).to_contain_text(re.compile("needs 5 online machines"), timeout=20_000)
    expect(refusal.get_by_role("heading", name="Not enough resources")).to_be_visible(timeout=10_000)
    # What fits instead comes from the real suggest_machines: both local machines.
    # In the order suggest_machines ranks them (by load), which either may lead.
    expect(refusal).to_contain_text(
        re.compile(r"Only 2 machines are online \((local-0, local-1|local-1, local-0)\); 5 asked"), timeout=20_000)
    refusal.get_by_role("button", name="Use 2 machines").click()
    expect(form.locator("input[name=nodes]")).to_have_value("2", timeout=10_000)


def box_of(locator):
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def assert_inside(inner, outer):
    assert outer["x"] < inner["x"] and inner["x"] + inner["width"] < outer["x"] + outer["width"], (inner, outer)
    assert outer["y"] < inner["y"] and inner["y"] + inner["height"] < outer["y"] + outer["height"], (inner, outer)


def test_the_topology_page_draws_a_running_jobs_nodes_on_their_machines_and_opens_it(stack, page, shots):
    job = stack.submit({"name": "topology-demo", "entrypoint": "examples/mlp_ddp.py",
                        "resources": {"nodes": 2, "procs_per_node": 2},
                        "args": ["--steps", "100000", "--step-sleep", "0.05"]})
    job_id = job["id"]
    try:
        nodes = {n["node_rank"]: n for n in stack.wait_job(job_id, {"running"})["nodes"]}
        assert sorted(nodes) == [0, 1] and nodes[0]["machine"]["id"] != nodes[1]["machine"]["id"]
        page.set_viewport_size({"width": 1280, "height": 800})
        log_in(stack.base, page)
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Topology").click()
        expect(page).to_have_url(re.compile(r"/topology$"))

        links = {}
        for rank, node in nodes.items():
            machine = node["machine"]
            ranks = f"ranks {node['rank_start']}–{node['rank_end']}"
            links[rank] = page.get_by_role("link", name=re.compile(
                rf"^Job topology-demo \(#{job_id}\), node {rank} of 2 on {machine['name']}, {ranks}, "
                rf"\w+{', master' if rank == 0 else ''}$"))
            expect(links[rank]).to_be_visible()
            machine_card = page.locator(f'.react-flow__node[data-id="machine-{machine["id"]}"]')
            expect(machine_card.get_by_role("link", name=re.compile(rf"^Machine {machine['name']}, "))).to_be_visible()
            # Drawn on its machine.
            assert_inside(box_of(links[rank]), box_of(machine_card))
        expect(links[0].get_by_text("★ master")).to_be_visible()
        expect(links[1].get_by_text("★ master")).to_have_count(0)
        # The link between the two nodes, from the master.
        expect(page.locator(f'.react-flow__edge[data-id="job-{job_id}-link-1"] path')).to_have_count(1)
        # Both nodes report running once their ranks are up.
        for rank in (0, 1):
            expect(links[rank]).to_have_attribute("aria-label", re.compile(r", running"), timeout=30_000)
        page.screenshot(path=str(shots / "topology.png"))

        links[1].click()
        expect(page).to_have_url(re.compile(rf"/jobs/{job_id}$"))
        # The job page has the same picture for its own nodes (not links to itself).
        own = page.get_by_role("group", name=re.compile(rf"^Job topology-demo \(#{job_id}\), node 1 of 2 on "))
        expect(own).to_be_visible()
        page.screenshot(path=str(shots / "job-topology.png"), full_page=True)
    finally:
        stack.api("POST", f"/api/jobs/{job_id}/stop")
    stack.wait_job(job_id, {"stopped"}, timeout=60)
    assert stack.wait_no_job_processes(job_id) == []


def test_the_job_page_follows_a_two_node_job_to_its_end(stack, page, shots):
    job = stack.submit({"name": "job-page-demo", "entrypoint": "examples/mlp_ddp.py",
                        "resources": {"nodes": 2, "procs_per_node": 1},
                        "args": ["--steps", "300", "--step-sleep", "0.02"]})
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(stack.base, page)
    page.goto(f"{stack.base}/jobs/{job['id']}")
    loss_chart = page.get_by_role("img", name="loss chart").locator("canvas")
    expect(loss_chart).to_have_count(1, timeout=60_000)
    page.screenshot(path=str(shots / "job-running.png"))

    header = page.locator(".job-header")
    expect(header.locator(".badge-completed")).to_be_visible(timeout=120_000)
    for rank in (0, 1):
        node = page.get_by_role("article", name=f"Node {rank}")
        expect(node.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "300")
        expect(node).to_contain_text("300 / 300 (100%)")
    expect(page.get_by_role("region", name="Timeline").locator(".tl-done")).to_have_count(1)
    search = page.get_by_label("Search logs")
    search.fill("done at step")
    search.press("Enter")
    expect(page.locator(".log-current")).to_contain_text("done at step 300")
    page.screenshot(path=str(shots / "job.png"))
    page.screenshot(path=str(shots / "job-full.png"), full_page=True)
    assert stack.wait_no_job_processes(job["id"]) == []


def test_a_killed_rank_shows_as_a_recovery_on_the_timeline_and_the_job_completes(stack, page, shots):
    job = stack.submit({"name": "recovery-demo", "entrypoint": "examples/mlp_ddp.py",
                        "resources": {"nodes": 2, "procs_per_node": 1},
                        "args": ["--steps", "120", "--step-sleep", "0.05"],
                        "checkpointing": {"enabled": True, "every_n_steps": 20, "keep": 2},
                        "fault_tolerance": {"max_restarts": 1, "heartbeat_timeout": 10}})
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(stack.base, page)
    page.goto(f"{stack.base}/jobs/{job['id']}")
    stack.wait_checkpoint(job["id"])
    stack.kill_rank(job["id"], "1", "0")

    timeline = page.get_by_role("region", name="Timeline")
    recovery = timeline.locator(".tl-recovery").first
    expect(recovery).to_be_visible(timeout=60_000)
    expect(recovery).to_contain_text("node 1 (local-1)")
    page.screenshot(path=str(shots / "job-recovering.png"))
    expect(page.locator(".job-header .badge-completed")).to_be_visible(timeout=120_000)
    # The resumed attempt's nodes carry on to the end, on the same page, without a reload.
    for rank in (0, 1):
        expect(page.get_by_role("article", name=f"Node {rank}")).to_contain_text("120 / 120 (100%)")
    expect(timeline.locator(".tl-done")).to_have_count(1)
    page.screenshot(path=str(shots / "job-recovered.png"), full_page=True)
    assert stack.job(job["id"])["attempt"] == 1
    assert stack.wait_no_job_processes(job["id"]) == []


def test_stop_all_nodes_asks_first_then_stops_every_node(stack, page, shots):
    job = stack.submit({"name": "stop-demo", "entrypoint": "examples/mlp_ddp.py",
                        "resources": {"nodes": 2, "procs_per_node": 1},
                        "args": ["--steps", "100000", "--step-sleep", "0.05"]})
    try:
        stack.wait_job(job["id"], {"running"})
        log_in(stack.base, page)
        page.goto(f"{stack.base}/jobs/{job['id']}")
        page.get_by_role("button", name="Stop all nodes…").click()
        dialog = page.get_by_role("alertdialog", name="Confirm stop")
        expect(dialog).to_contain_text(f'Stop job #{job["id"]} "stop-demo"? Every one of its 2 nodes is stopped')
        page.screenshot(path=str(shots / "job-stop-confirm.png"))
        # Cancel first: nothing happens.
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
        assert stack.job(job["id"])["status"] == "running"

        page.get_by_role("button", name="Stop all nodes…").click()
        page.get_by_role("alertdialog", name="Confirm stop").get_by_role("button", name="Stop all nodes").click()
        expect(page.locator(".job-header .badge-stopped")).to_be_visible(timeout=60_000)
        for rank in (0, 1):
            expect(page.get_by_role("article", name=f"Node {rank}")).to_contain_text("stopped")
        expect(page.get_by_role("button", name="Stop all nodes…")).to_have_count(0)
    finally:
        stack.api("POST", f"/api/jobs/{job['id']}/stop")
    final = stack.wait_job(job["id"], {"stopped"}, timeout=60)
    assert {n["status"] for n in final["nodes"]} == {"stopped"}
    assert stack.wait_no_job_processes(job["id"]) == []


def test_two_runs_are_compared_on_the_experiments_page(stack, page, shots):
    jobs = [stack.submit({"name": f"sweep-lr-{lr}", "entrypoint": "examples/mlp_ddp.py",
                          "resources": {"nodes": 1, "procs_per_node": 1}, "hyperparameters": {"lr": lr},
                          "args": ["--steps", "40"]}) for lr in (0.01, 0.05)]
    for job in jobs:
        assert stack.wait_job(job["id"], {"completed", "failed"})["status"] == "completed", stack.job_log_tail(job["id"])
    runs = [f"{job['id']}.0" for job in jobs]
    log_in(stack.base, page)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Experiments").click()
    expect(page).to_have_url(re.compile(r"/experiments$"))
    for run, lr in zip(runs, (0.01, 0.05), strict=True):
        page.get_by_role("checkbox", name=f"Compare run {run} (sweep-lr-{lr})").check()
    page.screenshot(path=str(shots / "experiments.png"), full_page=True)
    page.get_by_role("button", name=re.compile(r"^Compare")).click()
    expect(page).to_have_url(re.compile(rf"runs={re.escape(runs[0])}(,|%2C){re.escape(runs[1])}|"
                                        rf"runs={re.escape(runs[1])}(,|%2C){re.escape(runs[0])}"))

    comparison = page.get_by_role("region", name="Comparison")
    # The loss curves of both runs on one chart, and their hyperparameters side by side, differing.
    expect(comparison.get_by_role("img", name="loss chart").locator("canvas")).to_have_count(1, timeout=30_000)
    table = comparison.get_by_role("table", name="Side by side")
    lr_row = table.locator("tr", has=page.get_by_role("rowheader", name=re.compile(r"^lr\b")))
    expect(lr_row).to_have_attribute("data-differs", "true")
    expect(lr_row).to_contain_text("0.01")
    expect(lr_row).to_contain_text("0.05")
    expect(table.get_by_role("rowheader", name=re.compile(r"^loss \(last value\)"))).to_be_visible()
    page.screenshot(path=str(shots / "experiments-compare.png"), full_page=True)


# Both local agents' cores (a 2-core machine each): a job of this size has the cluster to itself.
WHOLE_CLUSTER = {"nodes": 2, "procs_per_node": 2}


def whole_cluster_job(name: str, steps: int, **extra) -> dict:
    return {"name": name, "entrypoint": "examples/mlp_ddp.py", "resources": WHOLE_CLUSTER,
            "args": ["--steps", str(steps), "--step-sleep", "0.05"], "fault_tolerance": {"max_restarts": 0}, **extra}


def test_the_queue_page_shows_a_job_waiting_behind_a_busy_cluster_and_the_usage_page_its_hours(stack, page, shots):
    created = stack.api("POST", "/api/projects", json={"name": "vision", "description": "image models"})
    assert created.status_code == 201, created.text
    # High: nothing queued below it may preempt it while the page is looked at.
    blocker = stack.submit(whole_cluster_job("queue-blocker", 100_000, priority="high"))
    try:
        stack.wait_job(blocker["id"], {"running"})
        waiter = stack.submit(whole_cluster_job("queue-waiter", 40, project="vision", priority="low"))
        log_in(stack.base, page)
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Queue").click()
        expect(page).to_have_url(re.compile(r"/queue$"))

        row = page.get_by_role("table", name="Queued jobs").locator(f'tr[data-job-id="{waiter["id"]}"]')
        expect(row.get_by_role("link", name="queue-waiter")).to_have_attribute("href", f"/jobs/{waiter['id']}")
        # Its place, project, owner and what it asks; the reason comes with the first queue pass.
        expect(row.locator("td").first).to_have_text("1")
        expect(row).to_contain_text("vision")
        expect(row).to_contain_text("admin")
        expect(row).to_contain_text("4 processes")
        expect(row.locator(".queue-reason")).to_contain_text(re.compile(r"waiting for 2 machines"), timeout=30_000)
        expect(row.locator(".tag-head")).to_be_visible()
        select = row.get_by_role("combobox", name=f"Priority of queue-waiter (#{waiter['id']})")
        expect(select).to_have_value("low")
        page.screenshot(path=str(shots / "queue.png"), full_page=True)

        # The admin raises it (still below the running job's): the server has it at once.
        select.select_option("normal")
        expect(select).to_have_value("normal")
        deadline = time.monotonic() + 10
        while stack.job(waiter["id"])["priority"] != 0:
            assert time.monotonic() < deadline, stack.job(waiter["id"])
            time.sleep(0.2)
        expect(row.get_by_role("alert")).to_have_count(0)

        # The job list badges the running job's priority (not normal), not the waiter's (normal now).
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        jobs = page.get_by_role("table").first
        expect(jobs.locator("tr", has=page.get_by_role("link", name="queue-blocker", exact=True)).locator(".prio-high")).to_be_visible()
        expect(jobs.locator("tr", has=page.get_by_role("link", name="queue-waiter", exact=True)).locator(".prio")).to_have_count(0)
        page.screenshot(path=str(shots / "jobs-priorities.png"), full_page=True)

        # The waiter's page says why it waits.
        page.goto(f"{stack.base}/jobs/{waiter['id']}")
        expect(page.locator(".job-header .status-note")).to_contain_text(re.compile(r"Waiting in the queue: waiting for 2 machines"))
        expect(page.get_by_role("combobox", name=f"Priority of queue-waiter (#{waiter['id']})")).to_have_value("normal")
        page.screenshot(path=str(shots / "job-queued.png"))

        page.get_by_role("navigation", name="Main").get_by_role("link", name="Queue").click()
        expect(row).to_be_visible()
    finally:
        stack.api("POST", f"/api/jobs/{blocker['id']}/stop")
    # Live: the waiter starts once the blocker has let go, and leaves the page without a reload.
    expect(page.get_by_text("Nothing is waiting: every job submitted is running or done.")).to_be_visible(timeout=90_000)
    page.screenshot(path=str(shots / "queue-empty.png"))
    final = stack.wait_job(waiter["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", stack.job_log_tail(waiter["id"])

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage").click()
    expect(page).to_have_url(re.compile(r"/usage$"))
    totals = page.get_by_role("table", name="Usage totals")
    for project in ("default", "vision"):
        # These machines have no GPUs: process-hours count, GPU-hours are 0.
        cells = totals.locator(f'tr[data-key="{project}"] td')
        expect(cells.nth(1)).to_have_text("0", timeout=30_000)
        assert float(cells.nth(2).inner_text()) > 0, cells.all_inner_texts()
        expect(page.get_by_role("img", name=f"{project} usage chart").locator("canvas")).to_have_count(1)
    page.screenshot(path=str(shots / "usage-7d.png"), full_page=True)
    page.get_by_role("button", name="Last 24 hours").click()
    page.get_by_role("button", name="By user").click()
    expect(page).to_have_url(re.compile(r"/usage\?.*by=user"))
    expect(totals.locator('tr[data-key="admin"]')).to_be_visible()
    expect(page.get_by_role("img", name="admin usage chart").locator("canvas")).to_have_count(1)
    page.screenshot(path=str(shots / "usage-24h-by-user.png"), full_page=True)

    # The admin (staff) sets the project's quota where projects are shown.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Projects").click()
    page.get_by_role("button", name="Edit vision").click()
    form = page.get_by_role("form", name="Settings of vision")
    form.get_by_label("Max processes").fill("8")
    page.screenshot(path=str(shots / "projects-edit.png"))
    form.get_by_role("button", name="Save").click()
    expect(form).to_have_count(0)
    expect(page.locator('tr[data-project="vision"]').get_by_label("Processes held of quota")).to_have_text("0 of 8")
    assert stack.api("GET", "/api/projects/vision").json()["max_processes"] == 8
    page.screenshot(path=str(shots / "projects.png"), full_page=True)


def test_a_job_preempted_by_a_higher_priority_one_shows_it_on_its_timeline_and_resumes(stack, page, shots):
    victim = stack.submit(whole_cluster_job("preempt-victim", 100_000, priority="low", preemption={"grace": 20},
                                            checkpointing={"enabled": True, "every_n_steps": 10, "keep": 2}))
    urgent = None
    try:
        stack.wait_job(victim["id"], {"running"})
        stack.wait_checkpoint(victim["id"])
        page.set_viewport_size({"width": 1280, "height": 800})
        log_in(stack.base, page)
        page.goto(f"{stack.base}/jobs/{victim['id']}")
        expect(page.locator(".job-header .badge-running")).to_be_visible(timeout=30_000)

        urgent = stack.submit(whole_cluster_job("preempt-urgent", 40, priority="high"))
        timeline = page.get_by_role("region", name="Timeline")
        # Asked to yield, then back in the queue: both marked, the second naming the state.
        expect(timeline.locator(".tl-preemption").filter(has_text="→ preempted")).to_have_count(1, timeout=120_000)
        expect(timeline.locator(".tl-preemption").first).to_contain_text(re.compile(r"preempt", re.I))
        page.screenshot(path=str(shots / "job-preempted.png"))
        timeline.scroll_into_view_if_needed()
        timeline.screenshot(path=str(shots / "timeline-preempted.png"))

        final = stack.wait_job(urgent["id"], {"completed", "failed", "stopped"}, timeout=180)
        assert final["status"] == "completed", stack.job_log_tail(urgent["id"])
        # The victim resumes once the urgent job is done, on the same page.
        expect(page.locator(".job-header .badge-running")).to_be_visible(timeout=120_000)
        expect(timeline).to_contain_text(re.compile(r"1 preemption"))
        page.screenshot(path=str(shots / "job-resumed.png"), full_page=True)
    finally:
        for job in (victim, urgent):
            if job:
                stack.api("POST", f"/api/jobs/{job['id']}/stop")
    stack.wait_job(victim["id"], {"stopped", "completed", "failed"}, timeout=60)
    assert stack.wait_no_job_processes(victim["id"]) == []
