"""Debian's headless Chromium driven by Playwright (the system executable: no browser is ever
downloaded), shared by the dashboard's browser tests and the dashboard bench."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

from .stack import ADMIN

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# A browser test waits for what the page shows, not for how soon: 5 s, Playwright's default, was
# passed on a loaded two-core run by a sign-in alone (the stack checks passwords with production's
# PBKDF2, a million iterations), right or wrong.
expect.set_options(timeout=30_000)
# Kept after the run, to look at (var/ is ignored by git).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def screenshot_folder(name: str) -> Path:
    """var/screenshots/<name>/, emptied."""
    folder = SCREENSHOTS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def fresh_page(browser: Browser, shots: Path, width: int, height: int, *, clipboard_for: str = "") -> Iterator[Page]:
    """A page in a new context of the module's Chromium (`width` x `height`; with clipboard access for
    the origin `clipboard_for`), whose last state is kept as `shots`/last.png and whose context is closed."""
    context = browser.new_context(viewport={"width": width, "height": height})
    if clipboard_for:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=clipboard_for)
    page = context.new_page()
    try:
        yield page
    finally:
        page.screenshot(path=str(shots / "last.png"), full_page=True)
        context.close()


def log_in(base: str, page: Page) -> None:
    """Sign in as the stack's admin through the login page."""
    page.goto(base + "/login")
    page.fill("input[name=username]", ADMIN[0])
    page.fill("input[name=password]", ADMIN[1])
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login"))
