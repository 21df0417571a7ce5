"""Every figure the guides quote comes from the code it describes: a setting's default, a
bound the code keeps, or what the planner computes. Each is read here from its source, so a
guide that differs from the code fails; a figure no row here reads fails too. Measured
figures live on the measurements pages; the README's are held to the records
(test_readme_figures.py)."""
import pathlib
import re

import pytest
from test_auto import BIG_TABLE, auto_table
from test_planner import job

from trainer.contract import hyperparameters, intermediate_output
from trainer.plan import auto, scaling
from trainer.supervision import peers
from trainer.training import tensorboard

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
GUIDES = ("first-job.md", "your-data.md", "daily-retraining.md", "your-model.md", "your-script.md", "distribution.md", "image.md")
# A number with a unit: seconds, bytes, a speed-up, a share, millions.
FIGURE = re.compile(r"\b\d[\d,]*(?:\.\d+)?(?:\s?(?:s|ms|KB|MB|GB|minutes?|hours?|x|million)\b|%)")


def default(name: str) -> float:
    return hyperparameters.SPEC_BY_NAME[name].default


def seconds(value: float) -> str:
    return f"{value:g} s"


def megabytes(value: float) -> str:
    return f"{value / 1e6:.2f} MB"


def local_sgd_bytes() -> tuple[float, float]:
    """What each of 2 hosts sends a step at the defaults: averaging, all-reducing."""
    return auto.averaged_and_stepped_bytes(job(hosts=2))


def ids_from_which_horovod_is_picked() -> str:
    """The smallest embedding table (ids, to 0.1 million) whose average sends more than its
    gradients, found by bisection."""
    low, high = 1, 100_000_000
    while high - low > 1_000:
        middle = (low + high) // 2
        averaged, stepped = auto.averaged_and_stepped_bytes(job(hosts=2, hp={"feature_size": str(middle)}))
        low, high = (middle, high) if averaged <= stepped else (low, middle)
    return f"{high / 1e6:.1f} million"


# (page, the figure as the page writes it) -> where it comes from (a set: every place the
# page quotes it from, which must agree)
FIGURES = {
    ("first-job.md", "10 s"): lambda: seconds(tensorboard.FLUSH_SECONDS),
    ("your-script.md", "30 s"): lambda: seconds(default("ps_worker_grace_sec")),
    ("your-script.md", "100 s"): lambda: seconds(default("stop_grace_sec")),
    ("your-script.md", "60 s"): lambda: seconds(intermediate_output.UPLOAD_WAIT_SEC),
    ("distribution.md", "300 s"): lambda: seconds(default("peer_wait_sec")),
    # how often a host logs the peers it waits for; how long a lost data host is silent
    ("distribution.md", "10 s"): lambda: {seconds(peers.LOG_EVERY_SEC), seconds(peers.LOST_AFTER_SEC)},
    ("distribution.md", "0.07 MB"): lambda: megabytes(local_sgd_bytes()[0]),
    ("distribution.md", "0.92 MB"): lambda: megabytes(local_sgd_bytes()[1]),
    ("distribution.md", "1.6 million"): ids_from_which_horovod_is_picked,
    # the generated table of auto's picks (test_auto.py) names the table size it was made with
    ("distribution.md", "10 million"): lambda: {f"{int(BIG_TABLE['feature_size']) // 1_000_000} million",
                                               *re.findall(r"\d+ million", auto_table())},
    ("distribution.md", "1.2x"): lambda: f"{scaling.PAYS_FROM_SPEEDUP:g}x",
}


def quoted(page: str) -> set[str]:
    return {re.sub(r"\s", " ", figure) for figure in FIGURE.findall((DOCS / page).read_text())}


@pytest.mark.parametrize("page", GUIDES)
def test_every_figure_a_guide_quotes_is_read_from_its_source(page):
    unread = quoted(page) - {figure for where, figure in FIGURES if where == page}
    assert not unread, (f"docs/{page} quotes {sorted(unread)}, which no row of FIGURES reads from the code; "
                        "a measured figure belongs on a measurements page")


@pytest.mark.parametrize("page, figure", sorted(FIGURES))
def test_a_guide_s_figure_is_what_its_source_gives(page, figure):
    assert figure in quoted(page), f"docs/{page} no longer quotes {figure}: drop its row"
    given = FIGURES[page, figure]()
    assert (given if isinstance(given, set) else {given}) == {figure}, f"docs/{page} says {figure}, its source gives {given}"
