"""Real Django projects in subprocesses, for tests that need what a user runs.

:func:`build_host_project` makes a fresh ``django-admin startproject`` host from README.md's
"Install into a host" snippets; :class:`Server` runs ``manage.py runserver`` of a project on a
free port. Both run in a clean environment (no ``DJANGO_SETTINGS_MODULE`` or ``DATABASE_URL``
of the test run), with this interpreter (so they use what ``pip install`` put in the venv) or
the one given, e.g. a fresh virtual environment's with the built wheel (:func:`wheel_python`).
"""

from __future__ import annotations

import base64
import http.cookiejar
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the test run's Django and database settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH"}
    }
    env.update(extra)
    return env


def readme_snippets(section: str = "## Install into a host") -> dict[str, str]:
    """The fenced ``python`` blocks of a README section, keyed by their first line's file name.

    A block that starts with ``# settings.py`` is returned as ``{"settings.py": <block>}``.
    """
    text = README.read_text(encoding="utf-8")
    start = text.index(section + "\n")
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end != -1 else len(text)]
    snippets = {}
    for block in re.findall(r"^```python\n(.*?)^```$", body, re.MULTILINE | re.DOTALL):
        first = block.splitlines()[0]
        match = re.fullmatch(r"# (\S+\.py)", first.strip())
        if match:
            snippets[match.group(1)] = block
    return snippets


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run a command, returning its stdout; a non-zero exit fails with both outputs."""
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result.stdout


def wheel_python(wheel: Path, directory: Path) -> str:
    """The interpreter of a fresh virtual environment at ``directory`` into which the wheel
    ``wheel`` (a ``cortex_sessions-….whl`` that ``python -m build`` made) was installed with
    its dependencies, as a user would: ``pip install <wheel>``. Nothing of this checkout or
    of the test run's environment is importable there.

    Raises AssertionError when the wheel is missing or the install fails.
    """
    assert wheel.is_file(), f"CORTEX_WHEEL={wheel} is not a file"
    run([sys.executable, "-m", "venv", str(directory)], ROOT, clean_env())
    python = str(directory / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", str(wheel)], directory, clean_env())
    return python


def build_host_project(directory: Path, python: str = sys.executable) -> Path:
    """A ``startproject`` host at ``directory`` with README.md's settings and urls applied.

    The settings snippet is appended to the generated ``settings.py``; the urls snippet
    replaces ``urls.py``. ``python`` is the interpreter that runs ``startproject`` (default:
    this one). Returns the project directory (the one with ``manage.py``).
    """
    snippets = readme_snippets()
    assert set(snippets) == {"settings.py", "urls.py"}, snippets.keys()
    directory.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "django", "startproject", "hostsite", str(directory)], ROOT, clean_env())
    package = directory / "hostsite"
    settings = package / "settings.py"
    settings.write_text(
        settings.read_text(encoding="utf-8") + "\n\n" + snippets["settings.py"], encoding="utf-8"
    )
    (package / "urls.py").write_text(snippets["urls.py"], encoding="utf-8")
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``manage.py runserver`` of the project in ``directory``, on a free local port, run by
    ``python`` (default: this interpreter).

    Its output goes to ``runserver-<port>.log`` in ``log_dir`` (default: ``directory``).
    """

    def __init__(
        self,
        directory: Path,
        env: dict[str, str],
        log_dir: Path | None = None,
        python: str = sys.executable,
    ):
        self.directory = directory
        self.python = python
        self.env = env
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None
        self.log = (log_dir or directory) / f"runserver-{self.port}.log"

    def __enter__(self) -> Server:
        handle = self.log.open("w")
        self.process = subprocess.Popen(
            [self.python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=self.directory,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"runserver exited:\n{self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise AssertionError(f"runserver did not start:\n{self.log.read_text()}")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Browser:
    """A tiny urllib client with a cookie jar: GET, JSON requests, and Django form log-ins."""

    def __init__(self, base: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def request(
        self,
        path: str,
        *,
        method: str | None = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        basic: tuple[str, str] | None = None,
    ) -> tuple[int, str, str]:
        """Returns ``(status, final URL, body)``; 4xx/5xx are returned, not raised.

        The method is POST when ``data`` is given, else GET, unless ``method`` says otherwise.
        """
        headers = dict(headers or {})
        if basic:
            token = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers=headers
        )
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.url, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.url, error.read().decode()

    def json(self, path: str, payload: object = None, **kwargs) -> tuple[int, object]:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        status, _url, body = self.request(path, data=data, headers=headers, **kwargs)
        return status, json.loads(body) if body else None

    def form_login(self, login_path: str, username: str, password: str) -> tuple[int, str, str]:
        """Log in through a Django login form (admin's or DRF's) at ``login_path``."""
        _status, _url, page = self.request(login_path)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:2000]
        form = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token.group(1), "username": username, "password": password}
        ).encode()
        return self.request(
            login_path,
            method="POST",
            data=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Referer": self.base + login_path,
            },
        )
