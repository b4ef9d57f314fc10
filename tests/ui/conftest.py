"""Headless Chromium for the browser tests: Debian's ``/usr/bin/chromium`` driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the browser tests, saying why, where Chromium is missing."""
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing: install Debian's chromium (scripts/test does when it can)"
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Headless Chromium.

    Function-scoped on purpose: Playwright's sync API leaves its own asyncio loop current
    while it runs, and pytest-jupyter's autouse ``jp_asyncio_loop`` (function-scoped, set up
    before any function-scoped fixture) would otherwise pick that loop up and close it.
    """
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
