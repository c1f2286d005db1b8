"""What a newcomer sees in a real browser: headless Chromium through Selenium.

- Swagger UI lists the endpoints, loading nothing but the server's own files (drf-spectacular-sidecar),
  both in a fresh host built from README.md and in the demo; a demo member logs in and uses it.
- The admin reads well at 1366 px: the session and message lists need no horizontal scrolling and
  long titles do not make tall rows; a message's JSON is wrapped, not clipped. Screenshots go to
  ``$BROWSER_SCREENSHOTS`` (or a pytest temporary folder) for a person to look at.

The browser is Debian's ``chromium`` with ``chromium-driver``; ``.ci/run`` installs them. Without
them these tests are skipped, unless ``CI_REQUIRE_BROWSER=1`` (set by ``.ci/run``), which turns the
skip into a failure so CI never passes without having looked. The demo's tests also need the
``demo`` extra (the Chit-Chat corpus), and skip (or, under ``CI_REQUIRE_BROWSER=1``, fail)
without it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ROOT, Browser, Server, build_host_project, clean_env, run

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
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if not missing:
        return
    _skip_or_fail(
        f"needs {' and '.join(missing)} (Debian packages chromium and chromium-driver, and "
        'selenium from the browser extra: pip install -e ".[browser]"; .ci/run installs them)'
    )


def _require_demo() -> None:
    """The demo's tests import the Chit-Chat corpus (``demo_setup``): skip without the extra."""
    try:
        import chitchat_dataset  # noqa: F401
    except ImportError:
        _skip_or_fail(
            'needs chitchat_dataset from the demo extra: pip install -e ".[demo]" '
            "(.ci/run installs it)"
        )


def _skip_or_fail(reason: str) -> None:
    """Skip the test for ``reason``, or fail it when ``CI_REQUIRE_BROWSER=1``."""
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
    _require_demo()
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


#: The change page's ``<h2>`` (the object's title): ``#content > h2`` on Django 5.2 and 6.0,
#: inside ``#content > .titles-and-tools > .titles`` on 6.1.
CHANGE_PAGE_HEADING = "#content > h2, #content > .titles-and-tools > .titles > h2"


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


@pytest.fixture
def without_the_demo_extra(monkeypatch) -> None:
    """``import chitchat_dataset`` raises ImportError, as without the demo extra."""
    monkeypatch.setitem(sys.modules, "chitchat_dataset", None)


def test_without_the_demo_extra_the_demo_tests_skip_naming_it(without_the_demo_extra, monkeypatch):
    monkeypatch.delenv("CI_REQUIRE_BROWSER", raising=False)

    with pytest.raises(pytest.skip.Exception, match=r"demo extra: pip install -e \"\.\[demo\]\""):
        _require_demo()


def test_without_the_demo_extra_ci_fails_the_demo_tests(without_the_demo_extra, monkeypatch):
    monkeypatch.setenv("CI_REQUIRE_BROWSER", "1")

    with pytest.raises(
        pytest.fail.Exception, match="CI_REQUIRE_BROWSER=1 but this run needs chitchat"
    ):
        _require_demo()


def test_swagger_lists_the_endpoints_in_a_host_built_from_the_readme(driver, host_server):
    paths = swagger_paths(driver, host_server.base)

    assert paths >= ENDPOINTS
    assert resources_not_from(driver, host_server.base) == []


def test_swagger_lists_the_endpoints_in_the_demo(driver, demo_server, tmp_path_factory):
    paths = swagger_paths(driver, demo_server.base)

    assert paths >= ENDPOINTS
    assert resources_not_from(driver, demo_server.base) == []
    driver.save_screenshot(str(screenshot_dir(tmp_path_factory) / "swagger.png"))


def test_a_demo_member_logs_in_and_tries_the_api_in_swagger(driver, demo_server):
    """bob is not staff; the banner's API log-in gives Swagger UI his session cookie."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(demo_server.base + "/api/auth/login/?next=/api/docs/")
    driver.find_element(By.NAME, "username").send_keys("bob")
    driver.find_element(By.NAME, "password").send_keys("demo")
    driver.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
    wait_for(driver, ".opblock-summary-path")
    assert driver.current_url == demo_server.base + "/api/docs/"

    # What "Try it out" sends: a same-origin request carrying the session cookie.
    answer = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch('/api/cortex/sessions/?limit=1', {headers: {Accept: 'application/json'}})
          .then(r => r.json().then(body => done({status: r.status, body: body})));
        """
    )

    assert answer["status"] == 200
    assert answer["body"]["count"] == 6  # 24 conversations over 4 members
    assert answer["body"]["results"][0]["scope"].startswith("org=acme/user=")


LONG_TITLE = "A session title that goes on and on about the login bug and the cookie " * 7
LONG_LINE = "A very long line of tool output without any break " * 12


@pytest.fixture(scope="module")
def long_content(demo_server) -> dict:
    """A session with a 500-character title and a tool message with wide JSON, made by bob."""
    client = Browser(demo_server.base)
    bob = ("bob", "demo")
    status, session = client.json(
        "/api/cortex/sessions/", {"agent_id": "coder", "title": LONG_TITLE[:500]}, basic=bob
    )
    assert status == 201, session
    message = {
        "role": "tool",
        "content": [
            {"type": "text", "text": LONG_LINE},
            {"type": "tool_result", "content": [{"type": "text", "text": LONG_LINE}]},
        ],
        "metadata": {"path": "/a/very/long/path/without/spaces" * 12},
    }
    status, appended = client.json(
        f"/api/cortex/sessions/{session['id']}/messages/", message, basic=bob
    )
    assert status == 201, appended
    return {"session": session["id"], "message": appended["messages"][0]["id"]}


@pytest.fixture(scope="module")
def admin_driver(driver, demo_server):
    """The browser, logged in to the demo's admin as the superuser."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(demo_server.base + "/admin/login/")
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys("demo")
    driver.find_element(By.CSS_SELECTOR, "[type=submit]").click()
    wait_for(driver, "#site-name")
    return driver


def layout(driver) -> dict:
    """Widths that reveal horizontal scrolling, and the heights of the list's rows."""
    return driver.execute_script(
        """
        const results = document.querySelector('.results');
        return {
          page: document.documentElement.scrollWidth,
          window: window.innerWidth,
          results: results ? [results.scrollWidth, results.clientWidth] : null,
          rows: Array.from(document.querySelectorAll('#result_list tbody tr'))
                     .map(r => r.getBoundingClientRect().height),
        };
        """
    )


def full_page_screenshot(driver, path: Path) -> None:
    """A screenshot of the whole page at the 1366 px width, then back to 1366 × 768."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, min(height, 4000))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(WIDTH, HEIGHT)


@pytest.mark.parametrize("model", ["session", "message"])
def test_admin_lists_fit_1366_pixels_without_tall_rows(
    admin_driver, demo_server, long_content, model, tmp_path_factory
):
    admin_driver.get(f"{demo_server.base}/admin/cortex_sessions/{model}/")
    wait_for(admin_driver, "#result_list")
    admin_driver.save_screenshot(str(screenshot_dir(tmp_path_factory) / f"{model}-list.png"))

    found = layout(admin_driver)

    assert found["window"] == WIDTH
    assert found["page"] <= WIDTH
    assert found["results"][0] <= found["results"][1]  # the table scrolls not sideways either
    assert len(found["rows"]) > 20
    assert max(found["rows"]) <= 60  # two short lines at most, whatever the title or text


def test_the_long_title_is_cut_and_whole_in_its_tooltip(admin_driver, demo_server, long_content):
    from selenium.webdriver.common.by import By

    admin_driver.get(f"{demo_server.base}/admin/cortex_sessions/session/?agent_id__exact=coder")
    cell = wait_for(admin_driver, "#result_list tbody .field-display_title")[0]
    line = cell.find_element(By.CSS_SELECTOR, ".cortex-line")

    assert line.get_attribute("title") == LONG_TITLE[:500]
    assert admin_driver.execute_script(
        "return arguments[0].scrollWidth > arguments[0].clientWidth", line
    )  # cut with an ellipsis, on one line
    assert cell.size["height"] <= 60


def test_message_json_is_wrapped_not_clipped(
    admin_driver, demo_server, long_content, tmp_path_factory
):
    admin_driver.get(
        f"{demo_server.base}/admin/cortex_sessions/message/{long_content['message']}/change/"
    )
    wait_for(admin_driver, "pre.cortex-json")
    full_page_screenshot(admin_driver, screenshot_dir(tmp_path_factory) / "message.png")

    blocks = admin_driver.execute_script(
        """
        return Array.from(document.querySelectorAll('pre.cortex-json')).map(p => {
          const box = p.getBoundingClientRect();
          return {scroll: p.scrollWidth, client: p.clientWidth, right: box.right,
                  text: p.textContent};
        });
        """
    )

    assert len(blocks) == 2  # content and metadata
    assert LONG_LINE.strip() in blocks[0]["text"]
    for block in blocks:
        assert block["scroll"] <= block["client"]
        assert block["right"] <= WIDTH
    assert layout(admin_driver)["page"] <= WIDTH


def test_a_long_titled_session_page_keeps_its_heading_on_one_line(
    admin_driver, demo_server, long_content, tmp_path_factory
):
    admin_driver.get(
        f"{demo_server.base}/admin/cortex_sessions/session/{long_content['session']}/change/"
    )
    heading = wait_for(admin_driver, CHANGE_PAGE_HEADING)[0]
    full_page_screenshot(admin_driver, screenshot_dir(tmp_path_factory) / "session.png")

    assert heading.size["height"] <= 40
    assert layout(admin_driver)["page"] <= WIDTH


#: How many characters of an element's text the browser shows, not cut off by its box (the
#: last text node inside it, so a badge or a link around the title does not count).
VISIBLE_CHARACTERS = """
const element = arguments[0];
const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
let text = null;
while (walker.nextNode()) { if (walker.currentNode.data.trim()) text = walker.currentNode; }
if (!text) return 0;
const right = element.getBoundingClientRect().left + element.clientWidth;
const range = document.createRange();
let shown = 0;
for (let end = 1; end <= text.length; end++) {
  range.setStart(text, 0);
  range.setEnd(text, end);
  if (range.getBoundingClientRect().right > right + 0.5) break;
  shown = end;
}
return shown;
"""


def test_long_titles_show_at_least_40_characters_at_1366_pixels(
    admin_driver, demo_server, long_content
):
    """The lists give a title room (they cut it at 12–15 characters before), with the sidebar
    and the filters open; the session page's heading shows far more."""
    from selenium.webdriver.common.by import By

    admin_driver.get(f"{demo_server.base}/admin/cortex_sessions/session/?agent_id__exact=coder")
    cell = wait_for(admin_driver, "#result_list tbody .field-display_title")[0]
    in_session_list = admin_driver.execute_script(
        VISIBLE_CHARACTERS, cell.find_element(By.CSS_SELECTOR, ".cortex-line")
    )

    admin_driver.get(f"{demo_server.base}/admin/cortex_sessions/message/")
    link = wait_for(admin_driver, f"#result_list a[href$='/{long_content['session']}/change/']")[0]
    line = link.find_element(By.XPATH, "./ancestor::span[1]")  # the session's line of the cell
    tooltip = line.get_attribute("title")
    in_message_list = admin_driver.execute_script(VISIBLE_CHARACTERS, line)

    admin_driver.get(
        f"{demo_server.base}/admin/cortex_sessions/session/{long_content['session']}/change/"
    )
    heading = wait_for(admin_driver, CHANGE_PAGE_HEADING)[0]
    in_heading = admin_driver.execute_script(VISIBLE_CHARACTERS, heading)

    assert in_session_list >= 40
    assert in_message_list >= 30  # it shares its column's width with the message's text above
    assert tooltip == LONG_TITLE[:500]
    assert in_heading >= 60
