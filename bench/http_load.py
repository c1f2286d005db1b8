"""The machinery of ``python -m bench.http``: a gunicorn server of the bench site
(:mod:`bench.http_settings`) and ``wrk`` runs driven by a generated Lua script.

``wrk`` (``apt-get install wrk``) sends the requests on loopback; its Lua script names the
method, the paths (rotated, so concurrent appends do not queue on one session's row lock), the
headers (session cookie, CSRF token, a fresh ``Idempotency-Key`` per request when asked) and the
body, and prints one JSON line of figures when the run is done.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

__all__ = ["Server", "WrkResult", "missing_tools", "request_once", "wrk"]

#: Seconds a starting gunicorn has to answer.
START_TIMEOUT = 60.0


def missing_tools() -> list[str]:
    """What the HTTP bench needs and this machine lacks (``gunicorn``, ``wrk``)."""
    missing = []
    if find_spec("gunicorn") is None:
        missing.append("gunicorn (pip install -e '.[bench]')")
    if shutil.which("wrk") is None:
        missing.append("wrk (apt-get install wrk)")
    return missing


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A gunicorn serving ``bench.http_wsgi`` on a free loopback port, as a context manager.

    Args:
        kind: the worker class, ``sync`` or ``gthread``.
        workers: worker processes.
        threads: threads per worker (``gthread``).
        env: the environment (``BENCH_DATABASE_URL`` among it).
        log: where gunicorn's output goes.
        port: the loopback port (0: a free one, so two runs on one machine do not collide).
    """

    def __init__(
        self,
        kind: str,
        *,
        workers: int,
        threads: int,
        env: Mapping[str, str],
        log: Path,
        port: int = 0,
    ) -> None:
        self.kind = kind
        self.workers = workers
        self.threads = threads if kind == "gthread" else 1
        self.env = dict(env)
        self.log = log
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """Concurrent connections that keep every worker (thread) busy and none queueing."""
        return self.workers * self.threads

    def __enter__(self) -> Server:
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "bench.http_wsgi:application",
            f"--bind=127.0.0.1:{self.port}",
            f"--workers={self.workers}",
            f"--worker-class={self.kind}",
            f"--threads={self.threads}",
            # No keep-alive: wrk's connections are opened once per run, and gthread pins a
            # kept-alive connection to the worker that accepted it, so a run's split of
            # connections over workers (4/0, 3/1 or 2/2, at random) set its throughput: up to
            # 2x between identical runs. Closed after each response (as sync workers always
            # do), every request is accepted anew and the load spreads over the workers.
            "--keep-alive=0",
            "--log-level=warning",
        ]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited ({self.process.returncode}); see {self.log}")
            try:
                urllib.request.urlopen(f"{self.url}/floor/sessions/count/", timeout=5)
            except urllib.error.HTTPError:
                return self  # it answers (403 without a cookie)
            except OSError:
                time.sleep(0.2)
            else:
                return self
        self.__exit__()
        raise RuntimeError(f"gunicorn did not answer within {START_TIMEOUT:.0f}s; see {self.log}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def request_once(
    url: str, *, method: str, headers: Mapping[str, str], body: bytes | None
) -> tuple[int, bytes]:
    """One request with urllib: ``(status, body)``, errors included."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


@dataclass
class WrkResult:
    """The figures of one ``wrk`` run."""

    requests: int
    seconds: float
    errors: int  # non-2xx/3xx answers and socket errors
    mean_ms: float  # wrk's mean latency

    @property
    def per_second(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds if self.seconds else 0.0


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lua string literal here (ASCII)


def _script(
    method: str, paths: Sequence[str], headers: Mapping[str, str], body: str, keyed: str | None
) -> str:
    header_items = ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items())
    path_items = ", ".join(_lua_string(p) for p in paths)
    return f"""
local paths = {{{path_items}}}
local headers = {{{header_items}}}
local body = {_lua_string(body) if body else "nil"}
local keyed = {_lua_string(keyed) if keyed else "nil"}
local counter = 0
local threads = 0
tid = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function request()
  counter = counter + 1
  local sent = headers
  if keyed then
    sent = {{}}
    for k, v in pairs(headers) do sent[k] = v end
    sent["Idempotency-Key"] = keyed .. "-" .. tid .. "-" .. counter
  end
  return wrk.format({_lua_string(method)}, paths[(counter % #paths) + 1], sent, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n{{"requests": %d, "duration_us": %d, "errors": %d, "mean_us": %f}}\\n',
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, latency.mean))
end
"""


def wrk(
    base_url: str,
    *,
    method: str,
    paths: Sequence[str],
    headers: Mapping[str, str],
    body: str,
    keyed: str | None,
    connections: int,
    seconds: float,
    workdir: Path,
) -> WrkResult:
    """Run ``wrk`` for ``seconds`` with ``connections`` connections (one thread).

    Args:
        keyed: a prefix for a new ``Idempotency-Key`` per request, or ``None`` for none.

    Raises:
        RuntimeError: wrk failed or printed no figures.
    """
    script = workdir / f"wrk-{os.getpid()}.lua"
    script.write_text(_script(method, paths, headers, body, keyed))
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout=30s",
        "-s",
        str(script),
        base_url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    lines = [line for line in result.stdout.splitlines() if line.startswith('{"requests"')]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({result.returncode}): {result.stderr or result.stdout}")
    figures = json.loads(lines[-1])
    return WrkResult(
        requests=int(figures["requests"]),
        seconds=figures["duration_us"] / 1e6,
        errors=int(figures["errors"]),
        mean_ms=figures["mean_us"] / 1000,
    )
