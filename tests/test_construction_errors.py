"""A failed construction leaves nothing behind: the user sees their one error, nothing at exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

CASES = {
    "misspelled option": "IngestHandler('x', token='tkn-1234', url='http://127.0.0.1:9', "
                         "flush_intervall=2.0)",
    "bad overflow": "IngestHandler('x', token='tkn-1234', url='http://127.0.0.1:9', "
                    "overflow='drop_everything')",
    "region typo": "IngestHandler('x', token='tkn-1234', region='eu-west')",
    "bad level": "IngestHandler('x', token='tkn-1234', url='http://127.0.0.1:9', level='LOUD')",
    "processor option": "IngestProcessor('x', token='tkn-1234', url='http://127.0.0.1:9', "
                        "batch_sise=10)",
}
EXPECTED = {
    "misspelled option": "did you mean 'flush_interval'?",
    "bad overflow": "overflow must be one of",
    "region typo": "unknown region 'eu-west'",
    "bad level": "Unknown level: 'LOUD'",
    "processor option": "did you mean 'batch_size'?",
}


def run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_traceback_and_nothing_at_exit(case: str) -> None:
    """The error the user caused is the only traceback; logging.shutdown finds nothing."""
    proc = run(f"import logging\nfrom loghandler import IngestHandler, IngestProcessor\n"
               f"{CASES[case]}\n")
    assert proc.returncode == 1
    assert proc.stderr.count("Traceback") == 1, proc.stderr
    assert EXPECTED[case] in proc.stderr
    assert "Exception ignored" not in proc.stderr
    assert "AttributeError" not in proc.stderr


def test_caught_error_leaves_no_handler_registered() -> None:
    """A program that catches the error and goes on exits cleanly, with nothing on stderr."""
    proc = run("import logging\nfrom loghandler import IngestHandler, ConfigurationError\n"
               "try:\n    IngestHandler('x', flush_intervall=2.0)\n"
               "except ConfigurationError as e:\n    print('caught:', e)\n"
               "assert not any(type(r()).__name__ == 'IngestHandler' "
               "for r in logging._handlerList)\n")
    assert proc.returncode == 0, proc.stderr
    assert "caught: unknown option 'flush_intervall'" in proc.stdout
    assert proc.stderr == ""


def test_dict_config_missing_token() -> None:
    """dictConfig without a token: its own error chain naming the variable, and no exit noise."""
    proc = run("import logging.config\nlogging.config.dictConfig({'version': 1, 'handlers': "
               "{'ingest': {'class': 'loghandler.IngestHandler', 'dataset': 'd'}}, "
               "'root': {'handlers': ['ingest']}})\n")
    assert proc.returncode == 1
    assert "no token: pass token=... or set LOGHANDLER_TOKEN" in proc.stderr
    assert "Unable to configure handler 'ingest'" in proc.stderr
    assert "Exception ignored" not in proc.stderr
    assert "AttributeError" not in proc.stderr
