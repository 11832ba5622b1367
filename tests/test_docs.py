"""The documentation site builds with no warning, offline, and no link points to a missing file.

`mkdocs build --strict` turns every warning into an error: a link to a missing page or anchor, a
page left out of the navigation, a page the navigation names that does not exist, a docstring
mkdocstrings cannot render. The build here is the one a user runs: the repository's own
mkdocs.yml, unchanged, only the output directory elsewhere.
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
    """Every relative link of the docs resolves to a file."""
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        for line, target in markdown_links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            file = target.split("#", 1)[0]
            if not (page.parent / file).exists():
                broken.append(f"{page.relative_to(ROOT)}:{line}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def heading_anchors(path: Path) -> set[str]:
    """The anchors a code host and mkdocs give the headings of a Markdown page (GitHub's rule:
    lowercase, punctuation but ``-`` and ``_`` dropped, spaces to ``-``)."""
    anchors: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            text = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_readme_link_and_image_resolves_in_a_checkout() -> None:
    """README.md is read on the code host, in a checkout and on the package index: each of its
    links and images is a path of the repository (the docs as Markdown, their images), so it
    opens wherever the repository is; an anchor names a heading of its page (on the package
    index they are made absolute, setup.py; tests/test_dist.py checks). An absolute
    address would be one nobody can check from here (the docs site did not exist: issue 47)."""
    readme = ROOT / "README.md"
    links = markdown_links(readme)
    assert len(links) >= 20, links  # the documentation section is there
    problems = []
    for line, target in links:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            problems.append(f"README.md:{line}: {target}: an absolute address")
            continue
        file, _, anchor = target.partition("#")
        path = (ROOT / file) if file else readme
        if not path.is_file():
            problems.append(f"README.md:{line}: {target}: no such file in the checkout")
        elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path):
            problems.append(f"README.md:{line}: {target}: no heading #{anchor} there")
    images = [t for _, t in links if t.endswith(".png")]
    assert len(images) >= 2, images
    assert not problems, "\n".join(problems)


def test_the_docs_host_builds_the_site_as_it_is() -> None:
    """.readthedocs.yaml builds mkdocs.yml (strict) with docs/requirements.txt and the package
    installed (mkdocstrings imports it); those requirements are the dev extra's."""
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with mkdocs")
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text(encoding="utf-8"))
    assert config["version"] == 2
    assert config["mkdocs"] == {"configuration": "mkdocs.yml", "fail_on_warning": True}
    installs = config["python"]["install"]
    assert {"requirements": "docs/requirements.txt"} in installs
    assert {"method": "pip", "path": "."} in installs
    wanted = [line.strip() for line in (DOCS / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert wanted and all(f'"{req}"' in pyproject for req in wanted), wanted
    assert "readthedocs.io" not in pyproject  # no address that does not exist


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


def test_every_nav_entry_exists() -> None:
    """Each page the navigation names is a file under docs/ (mkdocs only warns otherwise)."""
    missing = [page for page in nav_pages(load_config()["nav"]) if not (DOCS / page).is_file()]
    assert not missing, f"pages named in mkdocs.yml's nav that do not exist: {missing}"


def test_importing_the_main_module_runs_nothing() -> None:
    """mkdocstrings imports every module of the package, ``loghandler.__main__`` included:
    importing it must not run the command line (which would read the importer's argv)."""
    proc = subprocess.run([sys.executable, "-c", "import loghandler.__main__", "build"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` of the repository's mkdocs.yml as it is: no warning, no stray
    output, no network."""
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is missing in CI: it is in the test dependencies")
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    # Anything that tries the network fails fast instead of fetching: the build must not.
    env.update(NO_MKDOCS_2_WARNING="1", HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", NO_PROXY="", no_proxy="")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG),
                           "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # Every line is mkdocs' own (INFO, and the theme's notice); a WARNING, an ERROR or anything
    # else printed during the build (a module run on import) fails the test.
    stray = [line for line in output.splitlines()
             if line.strip() and not line.startswith("INFO")]
    assert not stray, "\n".join(stray)
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    # The API reference really comes from the docstrings.
    assert "IngestHandler" in reference and "Parameters" in reference
    assert "batch_size" in reference  # the option sections added to the docstrings at import
    assert (site / "guides" / "flask" / "index.html").is_file()
    assert "fonts.googleapis.com" not in (site / "index.html").read_text(encoding="utf-8")
