"""The figures README.md quotes are the benchmarks' recorded ones (trainer/bench/recorded/),
so the page and the record cannot differ."""
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECORDED = ROOT / "trainer" / "bench" / "recorded"


def figures(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())["figures"]


def speed_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("## Speed"):text.index("\n## ", text.index("## Speed") + 1)]


def test_the_readme_quotes_the_recorded_figures():
    peer, limit = figures("peer"), figures("limit")
    quoted = re.search(r"trains ([\d.]+)x the samples/s of\s+DeepCTR's DeepFM, at eval AUC ([\d.]+) against "
                       r"([\d.]+).*reaches ([\d.]+) of the FLOP/s", speed_section(), re.S)
    assert quoted, speed_section()
    assert quoted.groups() == (f"{peer['speedup']:.2f}", f"{peer['ours_eval_auc']:.4f}",
                               f"{peer['deepctr_eval_auc']:.4f}", f"{limit['fraction_of_matmul']:.3f}")


def test_every_number_of_the_speed_section_is_one_of_them():
    """A figure added to the section without a record fails here (the machine's vCPUs aside)."""
    peer, limit = figures("peer"), figures("limit")
    allowed = {f"{peer['speedup']:.2f}", f"{peer['ours_eval_auc']:.4f}", f"{peer['deepctr_eval_auc']:.4f}",
               f"{limit['fraction_of_matmul']:.3f}", "2"}
    numbers = set(re.findall(r"\d+(?:\.\d+)?", speed_section()))
    assert numbers <= allowed, numbers - allowed
