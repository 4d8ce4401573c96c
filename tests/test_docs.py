"""The docs: docs/configuration.md is what scripts/config_docs.py makes of the config tree now
(its comment, type and bounds extraction checked on a hand-written section), the site builds
with `mkdocs build --strict` (a broken link or a page left out of the nav fails it), and every
relative link in README.md names a file or folder that exists."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("config_docs", REPO / "scripts" / "config_docs.py")
config_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(config_docs)


@dataclasses.dataclass(frozen=True)
class Ge:  # as annotated-types declares a bound
    ge: int


@dataclasses.dataclass(frozen=True)
class Example:
    """The example section."""

    # the first comment line
    # and its second line
    size: Annotated[int, Ge(1)] = 4  # and the end of the line
    mode: Literal["a", "b"] = "a"

    other: tuple[str, ...] = ("x",)  # a blank line above: nothing of `mode`'s


def test_a_sections_comments_types_defaults_and_bounds_are_read():
    lines, nested = config_docs.section("example", Example)
    assert lines[2] == "The example section." and nested == []
    assert lines[4:] == ["| key | type | default | bounds | what it does |", "|---|---|---|---|---|",
                         "| `size` | integer | `4` | >= 1 | the first comment line and its second line and the end of the line |",
                         '| `mode` | one of `"a"`, `"b"` | `"a"` |  |  |',
                         '| `other` | list of string | `["x"]` |  | a blank line above: nothing of `mode`\'s |', ""]


def test_the_configuration_page_is_current():
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == config_docs.render(), "docs/configuration.md is out of date: run .venv/bin/python scripts/config_docs.py"
    for section in ("[run]", "[engine]", "[reward.models.<name>]", "[serve.tenants.<name>]"):
        assert f"## `{section}`" in page


def test_the_docs_site_builds_strict(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_every_relative_link_of_the_readme_resolves():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert len(local) >= 10  # the docs index and the files to read first
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README.md links to what does not exist: {missing}"
