"""What a newcomer sees in a real browser: headless Chromium through Selenium.

- Swagger UI lists the endpoints, loading nothing but the server's own files (drf-spectacular-sidecar),
  both in a fresh host built from README.md and in the demo.

The browser is Debian's ``chromium`` with ``chromium-driver``; ``.ci/run`` installs them. Without
them these tests are skipped, unless ``CI_REQUIRE_BROWSER=1`` (set by ``.ci/run``), which turns the
skip into a failure so CI never passes without having looked.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ROOT, Server, build_host_project, clean_env, run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WIDTH, HEIGHT = 1366, 768  # the laptop screen the admin must read well on
ENDPOINTS = {
    "/api/cortex/sessions/",
    "/api/cortex/sessions/{id}/",
    "/api/cortex/sessions/{id}/messages/",
    "/api/cortex/sessions/resolve/",
    "/api/cortex/sessions/count/",
}


def _require_browser() -> None:
    missing = [
        name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path
    ]
    if not missing:
        return
    reason = (
        f"needs {' and '.join(missing)} (Debian packages chromium and chromium-driver; "
        ".ci/run installs them)"
    )
    if os.environ.get("CI_REQUIRE_BROWSER") == "1":
        pytest.fail(f"CI_REQUIRE_BROWSER=1 but this run {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver() -> Iterator:
    """A headless Chromium whose viewport is 1366 × 768 CSS pixels."""
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(60)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def host_server(tmp_path_factory) -> Iterator[Server]:
    """runserver of a fresh host built from README.md's snippets (as in test_host_install)."""
    _require_browser()
    directory = build_host_project(tmp_path_factory.mktemp("host"))
    env = clean_env()
    run([sys.executable, "manage.py", "migrate", "--noinput"], directory, env)
    with Server(directory, env) as server:
        yield server


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory) -> Iterator[Server]:
    """``make demo`` in miniature: the example project, migrated, demo_setup'd, on runserver."""
    _require_browser()
    directory = tmp_path_factory.mktemp("demo")
    env = clean_env(CORTEX_SQLITE_PATH=str(directory / "db.sqlite3"))
    manage = [sys.executable, "manage.py"]
    run([*manage, "migrate", "--noinput"], ROOT, env)
    run([*manage, "demo_setup", "--conversations", "24"], ROOT, env)
    with Server(ROOT, env, log_dir=directory) as server:
        yield server


def screenshot_dir(tmp_path_factory) -> Path:
    """Where screenshots go: ``$BROWSER_SCREENSHOTS`` if set, else a pytest temporary folder."""
    target = os.environ.get("BROWSER_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_for(driver, css: str, timeout: float = 30) -> list:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )
    return driver.find_elements(By.CSS_SELECTOR, css)


def swagger_paths(driver, base: str) -> set[str]:
    """The operation paths Swagger UI at ``base/api/docs/`` shows, once it has rendered them."""
    driver.get(base + "/api/docs/")
    summaries = wait_for(driver, ".opblock-summary-path")
    return {element.get_attribute("data-path") or element.text for element in summaries}


def resources_not_from(driver, base: str) -> list[str]:
    """URLs of everything the page loaded that did not come from ``base``."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    return [name for name in names if not name.startswith(base + "/")]


def test_swagger_lists_the_endpoints_in_a_host_built_from_the_readme(driver, host_server):
    paths = swagger_paths(driver, host_server.base)

    assert paths >= ENDPOINTS
    assert resources_not_from(driver, host_server.base) == []


def test_swagger_lists_the_endpoints_in_the_demo(driver, demo_server, tmp_path_factory):
    paths = swagger_paths(driver, demo_server.base)

    assert paths >= ENDPOINTS
    assert resources_not_from(driver, demo_server.base) == []
    driver.save_screenshot(str(screenshot_dir(tmp_path_factory) / "swagger.png"))
