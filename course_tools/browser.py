"""Debian's Chromium driven by Playwright, as the website check and the browser tests use it.

Playwright's own browser download is not used: `executable_path` points at an installed Chromium
(Debian: `apt-get install chromium`). The flags let it run headless as root and offline.

Example:

    from playwright.sync_api import sync_playwright

    from course_tools import browser

    if not browser.missing():  # "" when Chromium and Playwright are both there, else why not
        with sync_playwright() as playwright:
            chromium = browser.launch(playwright)
"""

from __future__ import annotations

from pathlib import Path

#: Debian's Chromium.
CHROMIUM = "/usr/bin/chromium"
#: No sandbox (it refuses to start as root with one), no GPU, and none of Chromium's background
#: connections (on a machine without internet access they fail, many at a time, at every start).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing(chromium: str = CHROMIUM) -> str:
    """Why Chromium cannot be driven here, in one line ("" when it can)."""
    if not Path(chromium).exists():
        return f"Chromium not found at {chromium} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return (
            "Playwright is not installed (pip install -c constraints.txt -e './course_tools[test]')"
        )
    return ""


def launch(playwright, chromium: str = CHROMIUM):
    """A headless Chromium browser from a running `sync_playwright()`."""
    return playwright.chromium.launch(executable_path=chromium, args=FLAGS)
