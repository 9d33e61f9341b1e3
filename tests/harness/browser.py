"""A real browser for the tests: Debian's chromium, headless, driven by selenium through Debian's
chromedriver (hack/setup.sh installs both). Offline: the driver's path is given and SE_OFFLINE is set, so
Selenium Manager never downloads a driver or a browser."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.harness.tooling import unavailable

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless chromium session (selenium's WebDriver); quit afterwards. Skipped (CI: failed) without
    chromium, chromedriver or selenium."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        unavailable(
            f"the browser tests need {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("the browser tests need selenium (pip install -e '.[dev]')")
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root, in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-background-networking",  # nothing beyond the page's own loopback server
        "--disable-component-update",
    ):
        options.add_argument(argument)
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"fp-chromium-{os.getpid()}"
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
