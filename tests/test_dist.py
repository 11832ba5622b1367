"""The package as it ships: the sdist and the wheel build cleanly, carry what they should, the
sdist runs its own tests, and a fresh virtual environment installs the wheel by its name
(`loghandler-ingest`, from the built files only) and gets this project.

The builds run without build isolation, so without the network: the build backend
(setuptools>=77) and `build` come with the dev extra.
"""

from __future__ import annotations

import email
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from loghandler.testing import LocalService

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
NAME = "loghandler-ingest"


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOGHANDLER_", "PYTHON")) and k != "VIRTUAL_ENV"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    kwargs.setdefault("env", env)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False,
                          **kwargs)  # type: ignore[call-overload, no-any-return]


def source_copy(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A copy of the source alone. A checkout's own build/ (or an extension built in place)
    would be packed as it is; and builds in the checkout itself write its egg-info, which two
    test processes (pytest -n) building at once would race on."""
    import shutil

    src = tmp_path_factory.mktemp(name) / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".*_cache"))
    return src


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The built sdist and wheel (in a temporary directory), and the build's output."""
    if importlib.util.find_spec("build") is None:
        if os.environ.get("CI"):
            pytest.fail("`build` is missing in CI: it is in the dev extra")
        pytest.skip("`build` is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("dist")
    proc = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                str(source_copy(tmp_path_factory, "dist-src"))],
               cwd=tmp_path_factory.mktemp("cwd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout + proc.stderr


def sdist_of(out: Path) -> Path:
    (sdist,) = out.glob("loghandler_ingest-*.tar.gz")
    return sdist


def wheel_of(out: Path) -> Path:
    # A platform wheel: it carries the compiled hot path built for this interpreter.
    (wheel,) = out.glob("loghandler_ingest-*.whl")
    return wheel


def test_build_prints_no_deprecation(dist: tuple[Path, str]) -> None:
    """The licence is an SPDX expression: setuptools prints no deprecation box."""
    _, output = dist
    assert not re.search(r"deprecat", output, re.IGNORECASE), output
    assert "!!" not in output


def test_wheel_metadata(dist: tuple[Path, str]) -> None:
    out, _ = dist
    with zipfile.ZipFile(wheel_of(out)) as wheel:
        (path,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(path))
        names = wheel.namelist()
    assert metadata["Name"] == NAME
    assert metadata["License-Expression"] == "MIT"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Source", "Issues", "Documentation", "Changelog"}
    assert urls["Issues"] == urls["Source"] + "/issues"
    assert all(u.startswith("https://") for u in urls.values())
    assert metadata.get_all("Requires-Dist")[0].startswith("urllib3")
    extras = set(metadata.get_all("Provides-Extra"))
    # "test": the engine's tests' own needs, for the other Pythons' runs and the wheels' tests
    assert extras == {"structlog", "fast", "cli", "loguru", "opentelemetry", "regex",
                      "test", "dev"}
    # The description is README; on the package index a relative link leads nowhere.
    description = metadata.get_payload()
    assert "In 30 seconds" in description
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    assert links and all(link.startswith("https://") for link in links), links
    # The page's files and the typing marker ship in the wheel; tests and docs do not.
    assert "loghandler/_local/web/index.html" in names and "loghandler/py.typed" in names
    assert not any(n.startswith(("tests/", "docs/", "examples/")) for n in names)
    # The compiled hot path, built (this machine has a compiler); its source stays in the sdist.
    assert any(n.startswith("loghandler/_speedups.") and n.endswith(".so") for n in names)
    assert not any(n.endswith(".c") for n in names)


def test_without_a_compiler_the_build_succeeds_on_the_python_path(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """No compiler (CC points at a program that fails): the wheel builds all the same, without
    the extension, and the package then runs its pure-Python path (tests/test_speedups.py
    runs that path with the extension blocked)."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("`build` is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("nocc")
    src = source_copy(tmp_path_factory, "nocc-src")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOGHANDLER_", "PYTHON")) and k != "VIRTUAL_ENV"}
    env.update(CC="false", LDSHARED="false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                str(src)], cwd=tmp_path_factory.mktemp("cwd2"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with zipfile.ZipFile(wheel_of(out)) as wheel:
        names = wheel.namelist()
    assert "loghandler/_front/handler.py" in names
    assert not any(n.endswith(".so") for n in names)


def test_sdist_carries_tests_examples_docs(dist: tuple[Path, str]) -> None:
    out, _ = dist
    with tarfile.open(sdist_of(out)) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "mkdocs.yml", "pyproject.toml",
                   "tests/conftest.py", "tests/helpers.py", "tests/faultserver.py",
                   "tests/test_faults.py", "examples/quickstart.py", "docs/index.md",
                   "docs/guides/flask.md", "benchmarks/__init__.py",
                   "loghandler/_local/web/app.js", "loghandler/_speedups.c", "setup.py"):
        assert needed in names, needed
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_sdist_runs_its_own_tests(dist: tuple[Path, str], tmp_path: Path) -> None:
    """Unpacked, the sdist's tests run against the sdist's own package."""
    out, _ = dist
    with tarfile.open(sdist_of(out)) as sdist:
        sdist.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.glob("loghandler_ingest-*")
    # The unpacked directory comes first on sys.path (python -m from there): its package is
    # the one imported, not this checkout's.
    where = run([sys.executable, "-c", "import loghandler; print(loghandler.__file__)"],
                cwd=unpacked)
    assert where.stdout.strip() == str(unpacked / "loghandler" / "__init__.py"), where
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "tests/test_package.py", "tests/test_faults.py", "-k",
                "test_package or 5xx_twice or 413 or poison or half_response"],
               cwd=unpacked)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert re.search(r"\b\d{2,} passed", proc.stdout), proc.stdout[-2000:]


def test_fresh_venv_installs_the_wheel_by_its_name(dist: tuple[Path, str],
                                                    tmp_path: Path) -> None:
    """`pip install --no-index --find-links DIST loghandler-ingest` gets this project.

    --no-index: nothing but the built files can be picked. urllib3, the one dependency, is this
    environment's, made visible to the new one by a .pth file, so pip finds it installed.
    """
    out, _ = dist
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
                    ).stdout.strip())
    deps = tmp_path / "deps"
    deps.mkdir()
    import urllib3

    package = Path(urllib3.__file__).parent
    (deps / "urllib3").symlink_to(package)
    for info in package.parent.glob("urllib3-*.dist-info"):
        (deps / info.name).symlink_to(info)
    (site / "deps.pth").write_text(str(deps) + "\n", encoding="utf-8")

    installed = run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(out),
                     NAME], cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"Successfully installed {NAME}-" in installed.stdout

    with LocalService(token="fresh-venv-token") as svc:
        script = ("import importlib.metadata, logging, loghandler\n"
                  "handler = loghandler.IngestHandler('fresh')\n"
                  "logging.getLogger('t').addHandler(handler)\n"
                  "logging.getLogger('t').warning('from the wheel')\n"
                  "assert handler.flush(10)\n"
                  "print(loghandler.__file__)\n"
                  f"print(importlib.metadata.version('{NAME}'))\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGHANDLER_", "PYTHON"))}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=svc.token)
        proc = run([str(python), "-c", script], cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        file, version = proc.stdout.split()
        assert Path(file).is_relative_to(site), file  # the wheel's, not this checkout's
        assert svc.events("fresh")[0]["message"] == "from the wheel"
    import loghandler

    assert version == loghandler.__version__
    command = run([str(venv / "bin" / "loghandler"), "--version"], cwd=tmp_path)
    assert command.returncode == 0 and loghandler.__version__ in command.stdout + command.stderr
