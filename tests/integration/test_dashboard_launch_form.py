"""TransformerLab's launch form and machine form as a person uses them, in Debian's headless Chromium driven
by Playwright: a single-machine job (the "Distributed training" switch off, one machine picked)
planned and launched from the New job form runs on that machine to completion; Add machine takes a
port, which the API then holds; a plan whose request never reached the server (the browser's own
network refuses it once, through Playwright's routing: our server is the real one) keeps what was
typed and plans on Retry. Screenshots under var/screenshots/<test>/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Route, expect

from .browser import fresh_page, log_in


@pytest.fixture(scope="module")
def stack(embedded_stack):
    return embedded_stack  # the shared one (conftest.py)


@pytest.fixture
def page(browser, shots, stack):
    with fresh_page(browser, shots, 1280, 800) as page:
        log_in(stack.base, page)
        yield page


def open_new_job_form(stack, page):
    page.goto(stack.base + "/jobs")
    page.get_by_role("button", name="New job").click()
    return page.get_by_role("form", name="New job")


def test_a_single_machine_job_launched_from_the_form_runs_on_the_machine_picked(stack, page, shots):
    posted: list[str] = []
    page.on("request", lambda request: posted.append(request.url) if request.method == "POST" else None)
    form = open_new_job_form(stack, page)
    switch = form.get_by_role("switch", name=re.compile("Distributed training"))
    # Off by default: one machine, no machine count; on, the distributed fields come back.
    expect(switch).not_to_be_checked()
    expect(form.locator("input[name=nodes]")).to_have_count(0)
    switch.check()
    expect(form.locator("input[name=nodes]")).to_have_value("2")
    page.screenshot(path=str(shots / "distributed-on.png"), full_page=True)
    switch.uncheck()

    form.locator("input[name=name]").fill("one-machine")
    expect(form.get_by_label("Plugin")).to_have_value(re.compile("mlp_ddp"))
    form.locator("input[name=steps]").fill("60")
    machine = form.locator("select[name=machine]")
    expect(machine.locator("option", has_text="local-1")).to_have_count(1, timeout=15_000)
    machine.select_option("local-1")
    page.screenshot(path=str(shots / "single-machine.png"), full_page=True)
    form.get_by_role("button", name="Plan").click()

    plan = form.get_by_role("region", name="Execution plan")
    expect(plan).to_contain_text("1 process on 1 machine", timeout=20_000)
    expect(plan.get_by_role("table", name="Nodes").locator("tbody tr")).to_have_count(1)
    expect(plan.get_by_role("table", name="Nodes")).to_contain_text("local-1")
    page.screenshot(path=str(shots / "single-machine-plan.png"), full_page=True)
    plan.get_by_role("button", name="Launch").click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=15_000)
    job_id = int(page.url.rsplit("/", 1)[-1])
    expect(page.locator(".badge").filter(has_text="completed").first).to_be_visible(timeout=120_000)
    # The seed's remote job dispatch: the whole job sent to the one machine picked.
    local_1 = next(m for m in stack.api("GET", "/api/machines").json() if m["name"] == "local-1")
    assert f"{stack.base}/api/network/machines/{local_1['id']}/dispatch_job" in posted
    job = stack.job(job_id)
    assert job["world_size"] == 1
    assert {node["machine"]["name"] for node in job["nodes"]} == {"local-1"}
    assert job["spec"]["placement"]["machines"] == ["local-1"]
    page.screenshot(path=str(shots / "job.png"), full_page=True)
    assert stack.wait_no_job_processes(job_id) == []


def test_add_machine_takes_a_port_which_the_api_then_holds(stack, page, shots):
    page.goto(stack.base + "/machines")
    page.get_by_role("button", name="Add machine").click()
    form = page.get_by_role("form", name="Add machine")
    form.get_by_label("Name").fill("tlab-box")
    form.get_by_label("Host").fill("10.9.8.7")
    port = form.get_by_label("Port")
    expect(port).to_have_attribute("placeholder", "8001")
    port.fill("99999")
    expect(form.get_by_role("alert")).to_contain_text("a port number, 1 to 65535.")
    port.fill("8338")
    expect(form.get_by_role("alert")).to_have_count(0)
    page.screenshot(path=str(shots / "add-machine.png"))
    form.get_by_role("button", name="Add").click()

    expect(page.get_by_text("token is shown only once", exact=False)).to_be_visible(timeout=15_000)
    page.get_by_role("button", name="Done").click()
    row = page.get_by_role("row", name="tlab-box", exact=True)
    expect(row).to_contain_text("10.9.8.7:8338")
    page.screenshot(path=str(shots / "machines.png"))
    machines = {m["name"]: m for m in stack.api("GET", "/api/machines").json()}
    assert machines["tlab-box"]["port"] == 8338
    assert stack.api("DELETE", f"/api/machines/{machines['tlab-box']['id']}").status_code == 204


def test_a_plan_that_met_a_network_error_keeps_the_input_and_plans_on_retry(stack, page, shots):
    refused: list[str] = []

    def refuse_once(route: Route) -> None:
        if not refused:
            refused.append(route.request.url)
            route.abort("failed")
        else:
            route.continue_()

    page.route("**/api/jobs/plan", refuse_once)
    form = open_new_job_form(stack, page)
    form.locator("input[name=name]").fill("flaky-network")
    form.locator("input[name=steps]").fill("40")
    form.get_by_role("button", name="Plan").click()

    alert = form.get_by_role("alert").filter(has_text="Could not plan the job")
    expect(alert).to_contain_text("could not reach the server", timeout=15_000)
    expect(form.locator("input[name=name]")).to_have_value("flaky-network")
    expect(form.locator("input[name=steps]")).to_have_value("40")
    page.screenshot(path=str(shots / "network-error.png"), full_page=True)
    assert len(refused) == 1

    alert.get_by_role("button", name="Retry").click()
    plan = form.get_by_role("region", name="Execution plan")
    expect(plan).to_contain_text("1 process on 1 machine", timeout=20_000)
    expect(form.get_by_text("could not reach the server")).to_have_count(0)
    page.screenshot(path=str(shots / "retried.png"), full_page=True)
