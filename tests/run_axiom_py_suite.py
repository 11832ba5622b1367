"""Run the official SDK's own test suite (axiom-py 0.15.0, from its sdist) against the local
service, as its maintainers run it against the real one.

    python tests/run_axiom_py_suite.py [pytest arguments]

Not part of the pytest run: it needs the package index (the sdist and the suite's own test
dependencies, installed into a throw-away virtual environment, not this one), and that suite is
not ours to copy into this repository. What it does: download the sdist, install axiom-py, its
test dependencies and this package into a temporary venv, start a ``LocalService``, point
``AXIOM_URL`` / ``AXIOM_EDGE_URL`` at it with a token (``AXIOM_TOKEN``, ``AXIOM_ORG_ID``,
``AXIOM_EDGE_DEPLOYMENT``), and run the suite's ``tests/``. The metrics (MPL) tests skip: they
need ``AXIOM_METRICS_DATASET``, and the local service has no metrics store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.15.0"
TEST_DEPS = ["pytest", "pytest-asyncio", "respx", "responses", "rfc3339"]
TOKEN = "xaat-axiom-py-suite-local"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="axiom-py-suite-") as tmp:
        work = Path(tmp)
        venv.create(work / "venv", with_pip=True)
        py = str(work / "venv" / "bin" / "python")
        pip = [py, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "download", "--no-binary", ":all:", "--no-deps",
                        f"axiom-py=={VERSION}", "-d", str(work)], check=True)
        (sdist,) = work.glob("axiom_py-*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        subprocess.run([*pip, "install", f"axiom-py=={VERSION}", *TEST_DEPS, str(ROOT)],
                       check=True)
        suite = work / f"axiom_py-{VERSION}"
        # The local service, from the package just installed into that venv.
        serve = ("import sys\nfrom loghandler.testing import LocalService\n"
                 f"with LocalService(token={TOKEN!r}) as s:\n"
                 "    print(s.url, flush=True)\n    sys.stdin.read()\n")
        with subprocess.Popen([py, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) as server:
            assert server.stdout is not None and server.stdin is not None
            url = server.stdout.readline().strip()
            env = {**os.environ, "AXIOM_URL": url, "AXIOM_EDGE_URL": url,
                   "AXIOM_TOKEN": TOKEN, "AXIOM_ORG_ID": "local",
                   "AXIOM_EDGE_DEPLOYMENT": "local"}
            env.pop("AXIOM_METRICS_DATASET", None)
            proc = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                                   *(argv or ["tests"])], cwd=suite, env=env)
            server.stdin.close()
        return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
