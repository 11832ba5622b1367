"""The package surface: a cheap import, the documented public names, typing marker."""

from __future__ import annotations

import importlib.resources
import json
import subprocess
import sys

import loghandler

# API.md's public names, plus the version, the stats snapshot type and the exit helper.
DOCUMENTED = {
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConfigurationError",
    "Error",
    "IngestHandler",
    "IngestProcessor",
    "IngestSink",
    "NotFoundError",
    "PartialIngestError",
    "RateLimitError",
    "Shipper",
    "Stats",
    "TransportError",
    "View",
    "__version__",
    "context",
    "flushing",
}

PROBE = r"""
import json, sys, threading
import urllib3.poolmanager

created = []
original = urllib3.poolmanager.PoolManager.__init__

def counting_init(self, *args, **kwargs):
    created.append(1)
    original(self, *args, **kwargs)

urllib3.poolmanager.PoolManager.__init__ = counting_init
import loghandler

print(json.dumps({
    "threads": threading.active_count(),
    "pools": len(created),
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("structlog", "tqdm")
                      or m in ("loghandler.cli", "loghandler._local.service",
                               "loghandler.testing")),
}))
"""


def run_probe(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_import_is_cheap() -> None:
    """import loghandler starts no thread, creates no PoolManager, imports no structlog/CLI."""
    probe = run_probe(PROBE)
    assert probe == {"threads": 1, "pools": 0, "modules": []}


def test_import_alone_pulls_no_optional_library() -> None:
    """Without anything imported first, structlog, tqdm and the CLI stay out of sys.modules."""
    probe = run_probe(
        "import json, sys, threading, loghandler\n"
        "print(json.dumps({'threads': threading.active_count(), 'modules': sorted(m for m in "
        "sys.modules if m.split('.')[0] in ('structlog', 'tqdm') or m == 'loghandler.cli')}))"
    )
    assert probe == {"threads": 1, "modules": []}


def test_urllib3_is_imported_by_a_shipper_or_a_request_not_by_the_package() -> None:
    """urllib3 (and ssl, email) cost most of the import: ``import loghandler`` and a Client
    alone do not pay for them; a request does, and so does building a handler, on the thread
    that builds it, so that its flusher's first request imports nothing while the application
    runs (each file read there cost the flusher a switch interval: the first delivery came
    over half a second late at full speed, docs/performance.md)."""
    probe = run_probe(
        "import json, sys, loghandler\n"
        "heavy = lambda: sorted(m for m in ('urllib3', 'ssl', 'email.utils') if m in sys.modules)\n"
        "after_import = heavy()\n"
        "client = loghandler.Client(token='t', url='http://127.0.0.1:9', timeout=2)\n"
        "after_client = heavy()\n"
        "handler = loghandler.IngestHandler('d', token='t', url='http://127.0.0.1:9',"
        " handle_sigterm=False)\n"
        "after_handler = heavy()\n"
        "try:\n"
        "    client.ingest('d', [{'n': 1}])\n"
        "except loghandler.TransportError as exc:\n"
        "    error = str(exc)\n"
        "handler.close()\n"
        "print(json.dumps({'import': after_import, 'client': after_client,"
        " 'handler': after_handler, 'error': error}))"
    )
    assert probe["import"] == []
    assert probe["client"] == []
    assert probe["handler"] == ["email.utils", "ssl", "urllib3"]
    assert "connection refused" in probe["error"]


def test_internal_modules_are_private() -> None:
    """Every module but the public ones is _-prefixed, so users can tell the surface from
    the file list; the public names all come from the package itself."""
    import pkgutil

    public = {"cli", "testing", "pytest_plugin", "structlog_support", "opentelemetry", "rq",
              "celery", "asgi", "wsgi", "django"}
    names = {m.name for m in pkgutil.iter_modules(loghandler.__path__)}
    assert public <= names
    assert {n for n in names - public if not n.startswith("_")} == set()
    for name in loghandler.__all__:
        module = getattr(getattr(loghandler, name), "__module__", "loghandler")
        assert module == "loghandler" or module.startswith("loghandler._"), (name, module)


def test_all_is_the_documented_surface() -> None:
    """__all__ equals the documented public names, sorted, each one importable."""
    assert set(loghandler.__all__) == DOCUMENTED
    assert len(loghandler.__all__) == len(DOCUMENTED)
    assert loghandler.__all__ == sorted(loghandler.__all__)
    for name in loghandler.__all__:
        obj = getattr(loghandler, name)
        if name == "__version__":
            assert isinstance(obj, str) and obj[:1].isdigit()
        else:  # the object itself, defined in the package, under its own name
            assert (obj.__name__, obj.__module__.split(".")[0]) == (name, "loghandler")


def test_error_tree() -> None:
    """The error hierarchy is the one API.md draws."""
    e = loghandler
    assert issubclass(e.ConfigurationError, e.Error)
    assert issubclass(e.ConfigurationError, ValueError)
    assert issubclass(e.TransportError, e.Error)
    for sub in (e.AuthenticationError, e.RateLimitError, e.NotFoundError):
        assert issubclass(sub, e.ApiError) and issubclass(sub, e.Error)
    assert not issubclass(e.TransportError, e.ApiError)


def test_version() -> None:
    """__version__ is a plain version string."""
    parts = loghandler.__version__.split(".")
    assert len(parts) >= 2 and all(p.isdigit() for p in parts[:2])


def test_py_typed_present() -> None:
    """The PEP 561 marker ships with the package."""
    assert importlib.resources.files("loghandler").joinpath("py.typed").is_file()


def test_public_classes_document_their_arguments() -> None:
    """help() shows every argument and option of the public classes, each with a line."""
    import inspect
    import re

    from loghandler._config import SHIPPER_OPTION_NAMES
    from loghandler._wire.settings import CLIENT_ARG_NAMES
    from loghandler.opentelemetry import IngestLogRecordProcessor

    fronts = ({"dataset", "client", "shipper", "transport", "send"} | CLIENT_ARG_NAMES
              | SHIPPER_OPTION_NAMES)
    expected = {
        loghandler.IngestHandler: fronts | {"level"},
        loghandler.IngestProcessor: fronts,
        loghandler.IngestSink: fronts,
        IngestLogRecordProcessor: fronts,
        loghandler.AsyncClient: set(CLIENT_ARG_NAMES),
        loghandler.Shipper: {"client", "dataset", "transport"} | SHIPPER_OPTION_NAMES,
        loghandler.Client: CLIENT_ARG_NAMES | {"transport"},
    }
    # Client declares its arguments (the wire's names are held equal to its signature, less
    # its own transport=: a front end's transport= is the shipper's), and AsyncClient takes
    # the same.
    assert set(inspect.signature(loghandler.Client).parameters) == CLIENT_ARG_NAMES | {
        "transport"}
    assert set(inspect.signature(loghandler.AsyncClient).parameters) == CLIENT_ARG_NAMES
    for cls, names in expected.items():
        doc = inspect.getdoc(cls) or ""
        documented = set(re.findall(r"^    (\w+) \(", doc, re.M))
        assert documented == names, (cls.__name__, names ^ documented)
        # Each constructor argument that has a name in the signature is among them.
        params = set(inspect.signature(cls).parameters) - {"options"}
        assert params <= documented | {"token"}, cls.__name__


def test_the_shared_modules_import_no_wing() -> None:
    """``_config.py`` (the options' checks), ``_levels.py`` and ``_documented.py`` sit below the
    engine, the front ends, the local service and the command line: none of them imports one,
    not even lazily inside a function (issue 43: ``_config`` reached into ``_engine.hold`` and
    ``_engine.shaping``)."""
    import ast
    from pathlib import Path

    package = Path(loghandler.__file__).parent
    wings = ("_engine", "_front", "_local", "cli")
    leaves = {"_levels.py", "_documented.py"}
    for name in ("_config.py", *sorted(leaves)):
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        imported: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # relative: within the package
                    imported += ([f"loghandler.{module}"] if module else
                                 [f"loghandler.{a.name}" for a in node.names])
                else:
                    imported.append(module)
            elif isinstance(node, ast.Import):
                imported += [a.name for a in node.names]
        assert imported, name  # the walk found its imports: the check can fail
        inside = [m for m in imported if m.split(".")[0] == "loghandler"]
        reached = [m for m in inside if m.split(".")[1] in wings]
        assert reached == [], (name, reached)
        if name in leaves:
            assert inside == [], (name, inside)
