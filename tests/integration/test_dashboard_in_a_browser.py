"""The dashboard as a person uses it, in Debian's headless Chromium driven by Playwright: log in,
see both machines, launch the demo job from the form, and watch it train to completion."""

from __future__ import annotations

import re
import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from .stack import ADMIN, start_stack

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = start_stack(tmp_path_factory.mktemp("browser"), env={})
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def page(tmp_path):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        try:
            yield page
        finally:
            page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
            browser.close()


def test_a_user_logs_in_launches_the_demo_job_and_watches_it_complete(stack, page, tmp_path):
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
    form.locator("select[name=entrypoint]").select_option("examples/mlp_ddp.py")
    form.locator("input[name=nodes]").fill("2")
    form.locator("input[name=procs_per_node]").fill("1")
    form.locator("input[name=steps]").fill("120")
    form.locator("button[type=submit]").click()

    # Submitting opens the new job's page.
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=15_000)
    job_id = int(page.url.rsplit("/", 1)[-1])

    expect(page.locator(".badge, [class*=badge]").filter(has_text="completed").first).to_be_visible(timeout=120_000)
    logs = page.locator("text=/\\[rank 1\\]/").first
    expect(logs).to_be_visible()
    expect(page.get_by_text(re.compile(r"rank 0: done at step 120"))).to_be_visible()
    page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    assert stack.wait_no_job_processes(job_id) == []


def test_bad_input_in_the_form_shows_the_field_error(stack, page):
    page.goto(stack.base + "/login")
    page.fill("input[name=username]", ADMIN[0])
    page.fill("input[name=password]", ADMIN[1])
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login"))
    page.get_by_role("button", name="New job").click()
    form = page.get_by_role("form", name="New job")
    form.locator("input[name=name]").fill("too-big")
    form.locator("input[name=nodes]").fill("5")
    form.locator("button[type=submit]").click()
    expect(form).to_contain_text(re.compile("needs 5 online machines"))
