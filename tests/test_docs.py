"""The documentation site builds with no warning, offline, and no link points to a missing file.

`mkdocs build --strict` turns every warning into an error: a link to a missing page or anchor, a
page left out of the navigation, a docstring mkdocstrings cannot render. The navigation may name
pages that other work has not written yet: the build here runs on a copy of mkdocs.yml from which
those entries are dropped (the test says which), so that a page added later only has to exist.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")
# Plugins known to build without the network (Material's "social", "privacy" or "blog" fetch
# fonts, images or assets, or may).
OFFLINE_PLUGINS = {"search", "mkdocstrings"}


def load_config() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with mkdocs")
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def nav_pages(nav: Any) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            pages += nav_pages(value)
        elif isinstance(value, str) and not re.match(r"[a-z]+://", value):
            pages.append(value)
    return pages


def existing_nav(nav: list[Any]) -> list[Any]:
    """The navigation without the pages that do not exist (and sections left empty)."""
    kept: list[Any] = []
    for entry in nav:
        if isinstance(entry, dict):
            title, value = next(iter(entry.items()))
            if isinstance(value, list):
                inner = existing_nav(value)
                if inner:
                    kept.append({title: inner})
            elif re.match(r"[a-z]+://", value) or (DOCS / value).is_file():
                kept.append(entry)
        elif (DOCS / entry).is_file():
            kept.append(entry)
    return kept


def markdown_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of each Markdown link or image outside code blocks and code spans."""
    links: list[tuple[int, str]] = []
    in_code = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            links.append((number, match.group(1)))
    return links


def test_no_link_points_to_a_missing_file() -> None:
    """Every relative link of the docs resolves to a file; README has no relative link at all.

    README is the package's description on the package index, where a relative link leads
    nowhere: it links the documentation site by absolute address.
    """
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        for line, target in markdown_links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            file = target.split("#", 1)[0]
            if not (page.parent / file).exists():
                broken.append(f"{page.relative_to(ROOT)}:{line}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)
    relative = [f"README.md:{line}: {target}" for line, target in markdown_links(ROOT / "README.md")
                if not re.match(r"https?://", target)]
    assert not relative, "README links by relative path:\n" + "\n".join(relative)


def test_every_page_is_in_the_navigation_and_the_build_is_offline() -> None:
    config = load_config()
    listed = set(nav_pages(config["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages <= listed, f"pages missing from the nav in mkdocs.yml: {sorted(pages - listed)}"
    assert config["theme"]["font"] is False  # Material would fetch Google Fonts
    names = {next(iter(p)) if isinstance(p, dict) else p for p in config.get("plugins", [])}
    assert names <= OFFLINE_PLUGINS, f"plugins that may fetch: {sorted(names - OFFLINE_PLUGINS)}"
    for page in ("index.md", "getting-started.md", "reliability.md", "faq.md", "reference.md",
                 "guides/flask.md", "guides/kubernetes.md", "integrations/structlog.md"):
        assert page in listed and (DOCS / page).is_file(), page


def test_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` on the pages that exist: no warning, no network."""
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is missing in CI: it is in the test dependencies")
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    yaml = pytest.importorskip("yaml")
    config = load_config()
    missing = sorted(set(nav_pages(config["nav"])) - {
        p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")})
    if missing:
        print("pages in the nav not written yet, left out of this build:", ", ".join(missing))
    config["nav"] = existing_nav(config["nav"])
    config["docs_dir"] = str(DOCS)
    config["site_dir"] = str(tmp_path / "site")
    built = tmp_path / "mkdocs.yml"
    built.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    # Anything that tries the network fails fast instead of fetching: the build must not.
    env.update(NO_MKDOCS_2_WARNING="1", HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", NO_PROXY="", no_proxy="")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(built)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    warnings = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    site = tmp_path / "site"
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    # The API reference really comes from the docstrings.
    assert "IngestHandler" in reference and "Parameters" in reference
    assert "batch_size" in reference  # the option sections added to the docstrings at import
    assert (site / "guides" / "flask" / "index.html").is_file()
    assert "fonts.googleapis.com" not in (site / "index.html").read_text(encoding="utf-8")
