"""The documentation holds together: every pitfall number that code, messages or docs cite
is defined in docs/pitfalls.md, every relative link of the README and docs/ leads to a
file (and to a heading where it names one), and the README stays a front door."""
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
CITED = re.compile(r"\bP(\d+)\b")
LINK = re.compile(r"\]\(([^)#\s]+\.md|[^)#\s]*)(#[^)\s]+)?\)")


def defined_pitfalls() -> set[str]:
    return set(re.findall(r"(?m)^### P(\d+)$", (ROOT / "docs" / "pitfalls.md").read_text()))


def anchors(path: pathlib.Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {"#" + re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"(?m)^#+ (.+)$", path.read_text())}


def test_every_cited_pitfall_is_defined():
    defined = defined_pitfalls()
    cited = {}
    for path in list((ROOT / "trainer").rglob("*.py")) + DOCS:
        for number in CITED.findall(path.read_text()):
            cited.setdefault(number, path.relative_to(ROOT))
    undefined = {f"P{n}": str(where) for n, where in cited.items() if n not in defined}
    assert not undefined, f"cited but not defined in docs/pitfalls.md: {undefined}"


def test_links_lead_somewhere():
    broken = []
    for page in DOCS:
        for target, anchor in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.name}: {target}{anchor}")
    assert not broken, broken


def test_every_page_the_code_and_tests_name_exists():
    sources = [*(ROOT / "trainer").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "build.sh"]
    missing = {f"{path.relative_to(ROOT)}: {page}" for path in sources
               for page in re.findall(r"\bdocs/[\w-]+\.md\b", path.read_text()) if not (ROOT / page).exists()}
    assert not missing, sorted(missing)


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 10_000, "the README grows: move the detail into docs/"
    assert readme.split("```bash\n", 1)[1].startswith("./build.sh demo") and "./build.sh test" in readme.split("\n")[4]
    assert os.path.exists(ROOT / "docs" / "hyperparameters.md")


# The README's Documentation: guides in a newcomer's order, then reference, then measurements.
DOCUMENTATION = {
    "Guides:": ["first-job.md", "your-data.md", "daily-retraining.md", "your-model.md", "your-script.md", "distribution.md", "image.md"],
    "Reference:": ["hyperparameters.md", "faults.md", "security.md", "glossary.md", "how-modes-run.md",
                   "pitfalls.md", "development.md"],
    "Measurements:": ["performance.md", "modes-measured.md"],
}


def test_the_readme_leads_to_every_page_as_a_guide_reference_or_measurement():
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("## Documentation"):]
    starts = [listed.index(group) for group in DOCUMENTATION] + [len(listed)]
    for (group, pages), start, end in zip(DOCUMENTATION.items(), starts, starts[1:]):
        linked = re.findall(r"\(docs/([\w.-]+\.md)\)", listed[start:end])
        assert list(dict.fromkeys(linked)) == pages, f"README's {group} lists {linked}, not {pages}"
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    grouped = {page for group in DOCUMENTATION.values() for page in group}
    assert grouped == pages, f"pages in no group of the README's Documentation: {sorted(pages - grouped)}"


def test_the_several_hosts_guide_stays_a_guide():
    """Its measurements live on docs/modes-measured.md and its mechanics on docs/how-modes-run.md."""
    assert len((ROOT / "docs" / "distribution.md").read_bytes()) <= 15_000, "move the detail to a reference page"


def test_the_documented_ports_are_the_ports_the_code_opens():
    """docs/security.md names every port a job listens on (the code's constants), and no other."""
    from trainer.launch.ssh_trust import SSH_PORT
    from trainer.plan.clusters import MASTER_PORT, MWMS_PORT, PS_PORT, PS_WORKER_PORT
    from trainer.plan.types import DATA_WORKER_PORT, DISPATCHER_PORT, STATUS_PORT

    opened = {SSH_PORT, MASTER_PORT, PS_PORT, PS_WORKER_PORT, MWMS_PORT, STATUS_PORT, DISPATCHER_PORT,
              DATA_WORKER_PORT}
    text = (ROOT / "docs" / "security.md").read_text()
    documented = set()
    for first, last in re.findall(r"\b(\d{2,5})(?:-(\d{2,5}))?\b", text):
        documented.update(range(int(first), int(last or first) + 1))
    ports = {n for n in documented if n == 22 or 1024 < n < 65536}
    assert ports == opened, f"documented only: {sorted(ports - opened)}, opened only: {sorted(opened - ports)}"
