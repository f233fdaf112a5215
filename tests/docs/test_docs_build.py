"""The documentation site builds with `bash tools/build_docs.sh`, and its strict build fails on a broken link."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def test_build_docs_script_builds_the_site():
    done = subprocess.run(
        ["bash", "tools/build_docs.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert (ROOT / "site" / "index.html").is_file()
    for page in ("configuration", "command-line", "json-output"):
        assert (ROOT / "site" / "reference" / page / "index.html").is_file(), page


def nav_pages(nav: list) -> list[str]:
    """Every page the nav names (`- Title: page.md`, `- page.md`, sections of them)."""
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def build(docs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(docs / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )


def test_a_broken_link_anchor_or_nav_entry_fails_the_build(tmp_path):
    # The project's configuration over one-line pages: what fails is the configuration's strictness, not a page.
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(ROOT / "docs" / "mkdocs.yml", docs / "mkdocs.yml")
    config = yaml.safe_load((docs / "mkdocs.yml").read_text())
    for page in nav_pages(config["nav"]):
        (docs / config["docs_dir"] / page).parent.mkdir(parents=True, exist_ok=True)
        (docs / config["docs_dir"] / page).write_text(f"# {Path(page).stem}\n")
    good = build(docs)
    assert good.returncode == 0, good.stderr[-4000:]

    # A link to a page that does not exist, a link to a heading a page does not have, a page the nav names missing.
    (docs / config["docs_dir"] / "index.md").write_text(
        "# Home\n\nSee [the guide](guides/missing.md) and [its keys](reference/configuration.md#no-such-section).\n"
    )
    (docs / config["docs_dir"] / "guides" / "sweeps.md").unlink()
    broken = build(docs)
    output = broken.stdout + broken.stderr
    assert broken.returncode != 0, output[-4000:]
    assert "'guides/missing.md', but the target is not found" in output, output[-4000:]
    assert "does not contain an anchor '#no-such-section'" in output, output[-4000:]
    assert "'guides/sweeps.md' is included in the 'nav' configuration, which is not found" in output, output[-4000:]
    assert "Aborted with 3 warnings in strict mode" in output, output[-4000:]
