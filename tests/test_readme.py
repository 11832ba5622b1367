"""Every code block of README.md and docs/**/*.md runs as written, against the local service, and
ships what it says.

The rules, for whoever adds a block to README.md or to a page under docs/:
- A ```python block runs as it is, in a fresh process, in an empty directory, with
  LOGHANDLER_URL / LOGHANDLER_TOKEN / LOGHANDLER_DATASET pointing at a fresh ``LocalService``
  (no views, no events). Functions it defines named ``test_*`` are then called. When it builds a
  handler, processor, shipper or calls ``ingest(``, events must have arrived at the service by the
  time the process has exited (unless it starts its own ``LocalService``, uses the
  ``loghandler_service`` fixture, or ships into a ``MemoryTransport`` or a ``capture()``).
- A ```sh block runs only when the line before it is ``<!-- run: sh -->`` (most shell blocks
  install packages or start servers); then under ``bash -e`` with the same environment, the
  package's scripts on PATH; one that runs ``loghandler ingest`` must deliver events.
- ``<!-- not-run: reason -->`` on the line before a block skips it: for blocks that are fragments
  by nature. Keep those few.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from loghandler.testing import LocalService

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TOKEN = "readme-token-7c1d"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SHIPS = re.compile(r"IngestHandler|IngestProcessor|Shipper\(|\.ingest\(|loghandler ingest")
OWN_SERVICE = re.compile(r"LocalService\(|loghandler_service|MemoryTransport\(|capture\(")
CALL_TESTS = """

for _name, _function in list(globals().items()):
    if _name.startswith("test_") and callable(_function):
        _function()
"""


@dataclass
class Block:
    file: str  # relative to the repository's root
    line: int  # of the first line of code
    lang: str
    code: str
    marker: str  # the HTML comment on the line before the fence, or ""

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}-{self.lang or 'plain'}"


def markdown_files() -> list[Path]:
    """README.md and every page under docs/ (whatever exists when the tests are collected)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def readme_blocks(path: Path = README) -> list[Block]:
    name = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    marker = ""
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        match = FENCE.match(lines[i])
        if match:
            # A fence indented inside a list item is a block like any other: its code is
            # dedented by the fence's own indentation, as Markdown renders it.
            indent = len(match.group(1))
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            code = "\n".join(line[indent:] if line[:indent].strip() == "" else line.lstrip()
                             for line in lines[i + 1:end])
            blocks.append(Block(name, i + 2, match.group(2), code + "\n", marker))
            marker = ""
            i = end + 1
            continue
        if stripped.startswith("<!--"):
            marker = stripped
        elif stripped:
            marker = ""
        i += 1
    return blocks


def runnable(block: Block) -> bool:
    if block.marker.startswith("<!-- not-run"):
        return False
    if block.lang == "python":
        return True
    return block.lang in ("sh", "bash", "shell") and block.marker == "<!-- run: sh -->"


ALL_BLOCKS = [b for path in markdown_files() for b in readme_blocks(path)]
BLOCKS = [b for b in ALL_BLOCKS if runnable(b)]


def test_markers_are_known_and_give_a_reason() -> None:
    """A marker is either `run: sh` or `not-run: <reason>`; python blocks are run, not skipped."""
    for block in ALL_BLOCKS:
        if block.marker:
            assert re.fullmatch(r"<!-- (run: sh|not-run: \S.*\S) -->", block.marker), block.id
    python = [b for b in ALL_BLOCKS if b.lang == "python"]
    assert len([b for b in python if runnable(b)]) >= 8
    assert len([b for b in python if runnable(b) and b.file == "README.md"]) >= 2
    assert any("wrap_for_formatter" in b.code for b in BLOCKS)
    assert any("render_to_log_kwargs" in b.code for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    """The block runs as written and, when it ships events, they arrive."""
    if "structlog" in block.code:
        pytest.importorskip("structlog", reason="structlog is in the dev extra")
    with LocalService(token=TOKEN) as svc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN,
                   LOGHANDLER_DATASET="readme",
                   PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
        if block.lang == "python":
            script = tmp_path / "block.py"
            script.write_text(block.code + CALL_TESTS, encoding="utf-8")
            command = [sys.executable, str(script)]
        else:
            script = tmp_path / "block.sh"
            script.write_text(block.code, encoding="utf-8")
            command = ["bash", "-e", "-o", "pipefail", str(script)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                              cwd=tmp_path)
        assert proc.returncode == 0, f"{block.id}\n{proc.stdout}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, f"{block.id}\n{proc.stderr}"
        if SHIPS.search(block.code) and not OWN_SERVICE.search(block.code):
            arrived = sum(svc.datasets().values())
            assert arrived > 0, f"{block.id} shipped nothing\n{proc.stdout}\n{proc.stderr}"
