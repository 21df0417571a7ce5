"""Every test the docs cite by name (tests/<path>.py::<name>) exists: a claim that names the
test that measures it names one that runs."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def citations():
    return sorted({(page.name, path, name) for page in PAGES for path, name in CITED.findall(page.read_text())})


def test_the_docs_cite_tests():
    assert len(citations()) > 20


def test_every_cited_test_exists():
    missing = [f"{page}: {path}::{name}" for page, path, name in citations()
               if not (ROOT / path).is_file()
               or not re.search(rf"^(async )?def {name}\(|^class {name}\b", (ROOT / path).read_text(), re.M)]
    assert missing == []
