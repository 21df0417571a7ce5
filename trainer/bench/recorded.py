"""A benchmark's last recorded figures, kept in the repository (trainer/bench/recorded/NAME.json),
and how far a run moved from them.

A step that gets slower says so the next time its benchmark runs, not months later: `bench
limit` and `bench peer` print each figure against the recorded one, and `--record` makes
this run's figures the new record (commit the file with the change that moved them). This
kind of machine is shared and noisy: a move within about 10% is within one run's noise;
alternate runs of two commits before calling it a change.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess

RECORDED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded")


def add_record_argument(parser) -> None:
    parser.add_argument("--record", action="store_true",
                        help=f"keep this run's figures as the recorded ones ({os.path.relpath(RECORDED_DIR)})")


def path_of(name: str, folder: str = RECORDED_DIR) -> str:
    return os.path.join(folder, f"{name}.json")


def commit() -> str:
    try:
        # "-dirty": measured with changes not yet committed.
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=os.path.dirname(RECORDED_DIR),
                              capture_output=True, text=True, timeout=10)
    except OSError:
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def compare(name: str, result: dict, figures: dict[str, str], record: bool, folder: str = RECORDED_DIR) -> dict:
    """{"recorded": the record or None, "moves": {key: this run / recorded}}; `figures` maps
    each compared key of `result` to its words. With `record`, this run becomes the record."""
    path = path_of(name, folder)
    recorded = None
    if os.path.exists(path):
        with open(path) as f:
            recorded = json.load(f)
    moves = {key: result[key] / recorded["figures"][key] for key in figures
             if recorded and recorded["figures"].get(key)}
    if record:
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "commit": commit(), "cpus": os.cpu_count(),
                       "figures": {key: result[key] for key in figures}}, f, indent=2)
            f.write("\n")
    return {"recorded": recorded, "moves": moves, "words": figures, "recorded_now": record}


def lines(comparison: dict) -> list[str]:
    """The comparison in words, for a benchmark's table."""
    recorded = comparison["recorded"]
    out = [""]
    if recorded is None:
        out.append("No figures recorded for this benchmark yet (run it with --record to keep this run's).")
    else:
        out.append(f"Against the figures recorded on {recorded['date']} at commit {recorded['commit']} "
                   f"({recorded['cpus']} CPUs):")
        for key, ratio in comparison["moves"].items():
            out.append(f"- {comparison['words'][key]}: {recorded['figures'][key]:,.3f} recorded, "
                       f"{ratio - 1:+.1%} in this run")
    if comparison["recorded_now"]:
        out.append("This run's figures are now the recorded ones.")
    return out
