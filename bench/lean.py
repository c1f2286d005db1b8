"""``python -m bench.lean COMMAND…``: run a command from a lean parent and pass its output through.

Linux keeps a process's peak RSS (``ru_maxrss``) across ``fork`` and ``exec``: a child started
straight from the benchmark runner (~125 MB after loading Django, psycopg and the peers) reports
the runner's high-water mark until it outgrows it, which hides the child's own growth. This
launcher imports nothing but the standard library's ``subprocess``, so the child it starts
inherits a high-water mark of a few megabytes and its ``ru_maxrss`` is its own.
"""

from __future__ import annotations

import subprocess
import sys


def main() -> None:
    """Run ``sys.argv[1:]``; exit with its status."""
    sys.exit(subprocess.run(sys.argv[1:], check=False).returncode)


if __name__ == "__main__":
    main()
