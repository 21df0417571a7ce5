"""A benchmark's recorded figures (trainer.bench.recorded): kept with --record, compared on
every later run."""
import json

from trainer.bench import recorded

FIGURES = {"samples_per_sec": "training samples/s"}


def test_a_first_run_says_nothing_is_recorded_and_records_only_when_asked(tmp_path):
    comparison = recorded.compare("limit", {"samples_per_sec": 50_000.0}, FIGURES, record=False, folder=tmp_path)
    assert comparison["recorded"] is None and comparison["moves"] == {}
    assert "No figures recorded for this benchmark yet" in "\n".join(recorded.lines(comparison))
    assert not (tmp_path / "limit.json").exists()


def test_a_run_is_compared_with_the_recorded_figures_and_can_replace_them(tmp_path):
    recorded.compare("limit", {"samples_per_sec": 50_000.0, "other": 1}, FIGURES, record=True, folder=tmp_path)
    kept = json.loads((tmp_path / "limit.json").read_text())
    assert kept["figures"] == {"samples_per_sec": 50_000.0}  # only the compared figures
    assert kept["commit"] and kept["date"] and kept["cpus"] >= 1

    comparison = recorded.compare("limit", {"samples_per_sec": 45_000.0}, FIGURES, record=False, folder=tmp_path)
    assert comparison["moves"] == {"samples_per_sec": 0.9}
    text = "\n".join(recorded.lines(comparison))
    assert f"Against the figures recorded on {kept['date']} at commit {kept['commit']}" in text
    assert "- training samples/s: 50,000.000 recorded, -10.0% in this run" in text
    assert json.loads((tmp_path / "limit.json").read_text()) == kept  # not replaced without --record


def test_the_repository_keeps_figures_for_limit_and_peer():
    for name, figures in (("limit", "trainer.bench.limit"), ("peer", "trainer.bench.peer")):
        with open(recorded.path_of(name)) as f:
            kept = json.load(f)
        module = __import__(figures, fromlist=["RECORDED_FIGURES"])
        assert set(kept["figures"]) == set(module.RECORDED_FIGURES), name
