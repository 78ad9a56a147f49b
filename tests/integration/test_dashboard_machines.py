"""The Machines page as an administrator uses it, in Debian's headless Chromium driven by Playwright
at 1280x800: both local machines online with their load bars; ping one (the round trip shown), drain
it and undrain it; health check all; add a machine (its join command, with a copy button); remove
that machine after confirming. Every step is saved as a screenshot under var/screenshots/<test>/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .browser import fresh_page, log_in


@pytest.fixture(scope="module")
def stack(embedded_stack):
    return embedded_stack  # the shared one (conftest.py)


@pytest.fixture
def page(browser, shots, stack):
    # The join command's Copy button writes to the clipboard.
    with fresh_page(browser, shots, 1280, 800, clipboard_for=stack.base) as page:
        yield page


def column_edges(page) -> list[float]:
    return [box["x"] for box in (th.bounding_box() for th in page.locator(".machines-table th").all()) if box]


def test_an_admin_pings_drains_adds_and_removes_machines(stack, page, shots):
    log_in(stack.base, page)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Machines").click()
    expect(page).to_have_url(re.compile(r"/machines$"))

    rows = {name: page.get_by_role("row", name=name, exact=True) for name in ("local-0", "local-1")}
    for row in rows.values():
        expect(row.locator(".badge")).to_have_text("online")
        # Live CPU and memory bars, as of the last heartbeat.
        expect(row.get_by_title(re.compile(r"^CPU \d+%$"))).to_be_visible(timeout=15_000)
        expect(row.get_by_title(re.compile(r"^Memory \d+%$"))).to_be_visible()
        expect(row.locator("time")).to_have_text(re.compile(r"just now|\ds ago|\d\ds ago"))
    # Everything fits the 1280 px width: no horizontal scrolling.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    edges = column_edges(page)
    page.screenshot(path=str(shots / "machines.png"))

    # Ping: the round trip to its agent and back, over the broker.
    rows["local-0"].get_by_role("button", name="Ping local-0").click()
    round_trip = rows["local-0"].get_by_label("Round trip")
    expect(round_trip).to_have_text(re.compile(r"^\d+(\.\d)? ms$"), timeout=15_000)
    page.screenshot(path=str(shots / "pinged.png"))

    # Drain, then undrain.
    rows["local-0"].get_by_role("button", name="Drain local-0").click()
    expect(rows["local-0"].locator(".badge")).to_have_text("draining", timeout=10_000)
    drained = {m["name"]: m["drained"] for m in stack.api("GET", "/api/machines").json()}
    assert drained == {"local-0": True, "local-1": False}
    page.screenshot(path=str(shots / "drained.png"))
    rows["local-0"].get_by_role("button", name="Undrain local-0").click()
    expect(rows["local-0"].locator(".badge")).to_have_text("online", timeout=10_000)
    expect(rows["local-0"].get_by_role("button", name="Drain local-0")).to_be_visible()

    # Health check all: every machine's round trip.
    page.get_by_role("button", name="Health check all").click()
    expect(page.get_by_text("2 of 2 answered")).to_be_visible(timeout=15_000)
    for row in rows.values():
        expect(row.get_by_label("Round trip")).to_have_text(re.compile(r"^\d+(\.\d)? ms$"))
    # The live numbers changed (heartbeats, round trips); the columns did not move.
    assert column_edges(page) == edges
    page.screenshot(path=str(shots / "health-check.png"))

    # Add a machine: the form says what is wrong while typing, then gives the join command once.
    page.get_by_role("button", name="Add machine").click()
    form = page.get_by_role("form", name="Add machine")
    form.get_by_label("Name").fill("local-0")
    expect(form.get_by_role("alert")).to_have_text("a machine named 'local-0' already exists.")
    form.get_by_label("Name").fill("gpu-new")
    expect(form.get_by_role("alert")).to_have_count(0)
    form.get_by_label("Host").fill("10.0.0 .9")
    expect(form.get_by_role("alert")).to_contain_text("a hostname or an IP address")
    page.screenshot(path=str(shots / "add-form-invalid.png"))
    form.get_by_label("Host").fill("10.0.0.9")
    form.get_by_label("Labels").fill("rack=9, gpu=none")
    expect(form.get_by_role("alert")).to_have_count(0)
    form.get_by_role("button", name="Add").click()

    notice = page.get_by_role("status").filter(has_text="is shown only once")
    command = notice.locator("pre")
    expect(command).to_have_text(re.compile(rf"^torchyard agent --server {re.escape(stack.base)} --token \S+$"))
    notice.get_by_role("button", name="Copy").click()
    expect(notice.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == command.text_content()
    new_row = page.get_by_role("row", name="gpu-new", exact=True)
    expect(new_row.locator(".badge")).to_have_text("pending")
    expect(new_row.get_by_role("list", name="Labels")).to_contain_text("rack=9")
    page.screenshot(path=str(shots / "added.png"))
    notice.get_by_role("button", name="Done").click()
    expect(command).to_have_count(0)

    # Remove it: asked first; Cancel keeps it, confirming removes it.
    new_row.get_by_role("button", name="Remove gpu-new").click()
    confirm = page.get_by_role("group", name="Remove gpu-new?")
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
    page.screenshot(path=str(shots / "remove-confirm.png"))
    page.keyboard.press("Enter")
    expect(confirm).to_have_count(0)
    expect(new_row).to_be_visible()
    new_row.get_by_role("button", name="Remove gpu-new").click()
    confirm.get_by_role("button", name="Remove gpu-new").click()
    expect(new_row).to_have_count(0, timeout=10_000)
    assert sorted(m["name"] for m in stack.api("GET", "/api/machines").json()) == ["local-0", "local-1"]
    expect(rows["local-0"]).to_be_visible()
    page.screenshot(path=str(shots / "removed.png"))
