"""Where the docs list the modes that can do something, the list is what the modes declare."""
import pathlib
import re

from trainer import modes
from trainer.contract.hyperparameters import SPEC_BY_NAME

ROOT = pathlib.Path(__file__).resolve().parents[2]


def named_modes(text: str) -> set[str]:
    return {name for name in modes.names() if re.search(rf"(?<![\w-]){name}(?![\w-])", text)}


def sentence(page: str, start: str, end: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    begin = text.index(start)
    return text[begin:text.index(end, begin)]


def test_steps_per_execution_names_the_modes_that_run_several_steps_a_call():
    several = {mode.name for mode in modes.all_modes() if mode.multi_step_calls}
    assert named_modes(SPEC_BY_NAME["steps_per_execution"].help.split("; auto")[0]) == several
    assert named_modes(sentence("performance.md", "(`steps_per_execution`, in", "):")) == several


def test_jit_compile_names_the_modes_xla_cannot_compile():
    refused = {mode.name for mode in modes.all_modes() if not mode.compiles_with_xla}
    assert named_modes(sentence("performance.md", "`jit_compile` (XLA; not with", ":")) == refused


def test_bench_modes_runs_every_mode():
    from trainer.bench.mode_speeds import MODES

    assert {hyperparameters["distribution"] for hyperparameters, _, _ in MODES.values()} == set(modes.names())


def test_a_data_group_feeds_the_modes_the_docs_name():
    fed = {mode.name for mode in modes.all_modes() if mode.reads_from_a_data_group}
    assert named_modes(sentence("distribution.md", "- Modes: ", " train on the training group")) == fed
