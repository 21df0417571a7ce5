"""What `auto` picks (trainer.plan.auto), as one decision table: the job's hosts, CPUs or GPUs,
TensorFlow line, table size, model and the SDK's keys -> the mode and the reason the plan
gives. The modes' declarations (trainer.modes) are what it reads."""
import dataclasses

import pytest
from test_planner import job, with_hooks, with_model_fn

from trainer import modes
from trainer.contract.user_code import EntryPoint
from trainer.errors import JobError
from trainer.plan import auto
from trainer.planner.planner import make_plan


def on(line, the_job):
    from trainer.tf_line import LINES

    return dataclasses.replace(the_job, tf_line=LINES[line])


def script(the_job):
    return dataclasses.replace(the_job, entry_point=EntryPoint("train.py", "/opt/ml/code", "script", "a script"))


BIG_TABLE = {"feature_size": "10000000"}  # local SGD's average: 5.6 MB a step against Horovod's 0.92 MB
SDK_PS = {"sagemaker_parameter_server_enabled": True}
SDK_MWMS = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}
SDK_MPI = {"sagemaker_mpi_enabled": True}

# name: (job, mode, the start of the reason, a later part of it or "")
DECISIONS = {
    "1 CPU host": (job(), "single", "1 CPU host, the built-in DeepFM, TensorFlow 2.14: single, one process", ""),
    "1 host, 1 GPU": (job(gpus=1), "single", "1 host with 1 GPU, the built-in DeepFM, TensorFlow 2.14: single", ""),
    "1 host, 4 GPUs, 2.14": (job(gpus=4), "horovod", "1 host with 4 GPUs, the built-in DeepFM, TensorFlow 2.14: "
                             "horovod, one process per GPU", ""),
    "1 host, 4 GPUs, 2.21 (its Horovod has no NCCL)": (
        on("2.21", job(gpus=4)), "mirrored", "1 host with 4 GPUs, the built-in DeepFM, TensorFlow 2.21: mirrored",
        "not horovod, faster where it fits: it does not train on GPUs on the TensorFlow 2.21 line"),
    "2 CPU hosts, 2.14": (job(hosts=2), "local_sgd", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.14: local_sgd, "
                          "each host training on its own batches and averaging the model every 64 steps", ""),
    "2 CPU hosts, 2.21": (on("2.21", job(hosts=2)), "local_sgd", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.21: "
                          "local_sgd", ""),
    "4 CPU hosts": (job(hosts=4), "local_sgd", "4 CPU hosts", ""),
    "2 CPU hosts, a table too large to average": (
        job(hosts=2, hp=BIG_TABLE), "horovod", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.14: horovod, one "
        "process per host with the host's CPUs, gradients all-reduced every step over MPI",
        "not local_sgd, faster where it fits: averaging the whole model every 64 steps would send 5."),
    "2 CPU hosts, 2.21, a table too large to average": (on("2.21", job(hosts=2, hp=BIG_TABLE)), "horovod", "2 CPU hosts", ""),
    "2 CPU hosts, hooks with a model_fn": (
        with_model_fn(job(hosts=2)), "horovod", "2 CPU hosts, a hooks model, TensorFlow 2.14: horovod",
        "not local_sgd, faster where it fits: it sends the whole model, and a hooks model's size is not known"),
    "2 CPU hosts, hooks without a model_fn (the built-in DeepFM)": (
        with_hooks(job(hosts=2), ("parse_fn",)), "local_sgd", "2 CPU hosts, the built-in DeepFM", ""),
    "2 CPU hosts, a hooks module by name": (job(hosts=2, hp={"user_module": "my_hooks"}), "horovod", "2 CPU hosts, a hooks model", ""),
    "2 hosts with 4 GPUs each, 2.14": (job(hosts=2, gpus=4), "horovod", "2 hosts with 4 GPUs each", "one process per GPU"),
    "2 hosts with 4 GPUs each, 2.21": (
        on("2.21", job(hosts=2, gpus=4)), "multi_worker_mirrored", "2 hosts with 4 GPUs each, the built-in DeepFM, "
        "TensorFlow 2.21: multi_worker_mirrored, one worker per host", "not local_sgd, faster where it fits: it does "
        "not train on GPUs"),
    "a script on 1 host": (script(job()), "single", "a training script with no distribution: one process", ""),
    "a script on 2 hosts with GPUs": (script(job(hosts=2, gpus=4)), "single",
                                      "a training script with no distribution: one process on every host", ""),
    "SDK parameter server, 2 hosts": (job(hosts=2, sdk=SDK_PS), "parameter_server",
                                      "sagemaker_parameter_server_enabled: one parameter server and one worker", ""),
    "SDK parameter server, 1 host: as auto (AWS's container runs no PS on one host)": (
        job(sdk=SDK_PS), "single", "sagemaker_parameter_server_enabled with 1 host(s): parameter_server runs on 2 "
        "or more", "single, one process"),
    "SDK multi-worker mirrored": (job(hosts=2, sdk=SDK_MWMS), "multi_worker_mirrored",
                                 "sagemaker_multi_worker_mirrored_strategy_enabled: one worker per host", ""),
    "SDK MPI": (job(hosts=2, sdk=SDK_MPI), "horovod", "sagemaker_mpi_enabled: one process per host", ""),
    "SDK MPI for a script": (script(job(hosts=2, sdk=SDK_MPI)), "horovod", "sagemaker_mpi_enabled: Horovod over MPI", ""),
    "SDK PS and MPI: PS first, as AWS's container reads them": (
        job(hosts=2, sdk={**SDK_PS, **SDK_MPI}), "parameter_server", "sagemaker_parameter_server_enabled", ""),
    "the hyperparameter beats the SDK's keys": (
        job(hp={"distribution": "tower"}, sdk=SDK_MPI), "tower", "distribution=tower (hyperparameter)", ""),
}


@pytest.mark.parametrize("name", DECISIONS)
def test_the_decision_table(name):
    the_job, mode, starts, later = DECISIONS[name]
    chosen, why = auto.choose(the_job, modes.all_modes())
    assert chosen.name == mode, why
    assert why.startswith(starts) and later in why, why
    assert make_plan(the_job).reason == why  # the plan gives the reason as auto made it


def _local_sgd_job(hosts=2, gpus=0, hp=None, hooks=None):
    the_job = job(hosts=hosts, gpus=gpus, hp=hp)
    return the_job if hooks is None else with_hooks(the_job, hooks)


@pytest.mark.parametrize("the_job, fits", [
    (_local_sgd_job(), True),                                                       # 0.07 MB against 0.92 MB
    (_local_sgd_job(hosts=4), True),
    (_local_sgd_job(hp={"feature_size": "1600000"}), True),                        # 0.91 MB against 0.92 MB
    (_local_sgd_job(hp={"feature_size": "1640000"}), False),                       # 0.93 MB against 0.92 MB
    (_local_sgd_job(hp={"feature_size": "400000", "average_every_steps": "16"}), False),  # 0.93 MB
    (_local_sgd_job(hp=BIG_TABLE), False),
    (_local_sgd_job(hosts=1), False),
    (_local_sgd_job(gpus=1), False),
    (_local_sgd_job(hooks=("model_fn",)), False),                                 # its size is not known
    (_local_sgd_job(hooks=("parse_fn",)), True),                                  # the built-in DeepFM still
    (_local_sgd_job(hp={"user_module": "my_hooks"}), False),
])
def test_local_sgd_fits_where_averaging_the_model_sends_no_more_than_every_steps_gradients(the_job, fits):
    assert (auto.misfit(modes.get("local_sgd"), the_job) is None) is fits


def test_modes_that_auto_picks_are_ranked_apart():
    """Two modes of one speed would leave the pick to the order of their names."""
    ranks = [mode.speed_rank for mode in modes.all_modes() if mode.speed_rank is not None]
    assert len(ranks) == len(set(ranks))


def test_exactly_one_mode_runs_a_script_that_asks_for_none():
    assert [mode.name for mode in modes.all_modes() if mode.script_default] == ["single"]


def test_each_of_the_sdk_s_keys_asks_for_exactly_one_mode():
    from trainer.plan import sdk

    for key in sdk.MODE_KEYS:
        assert len([mode for mode in modes.all_modes() if mode.sdk_key == key]) == 1, key


def test_a_job_no_mode_can_train_is_refused_naming_it():
    with pytest.raises(JobError, match="no distribution mode can train 1 CPU host"):
        auto.auto(job(), [modes.get("parameter_server"), modes.get("tower")])


# The situations docs/distribution.md's table of auto's picks covers, as jobs.
DOCUMENTED = (
    ("one CPU host", job()),
    ("one host with one GPU", job(gpus=1)),
    ("one host with several GPUs", job(gpus=4)),
    ("several CPU hosts, the built-in DeepFM, whose average sends less than its gradients", job(hosts=2)),
    ("several CPU hosts, a table too large to average (10 million ids at the defaults)", job(hosts=2, hp=BIG_TABLE)),
    ("several CPU hosts, a hooks model (its size unknown before it is built)", with_model_fn(job(hosts=2))),
    ("several hosts with GPUs", job(hosts=2, gpus=4)),
    ("a training script that asks for no mode", script(job(hosts=2))),
)


def auto_table() -> str:
    """The table of what auto picks on each line, as docs/distribution.md shows it."""
    rows = ["| the job | TensorFlow 2.14 | TensorFlow 2.21 |", "|---|---|---|"]
    for name, the_job in DOCUMENTED:
        picks = [auto.choose(on(line, the_job), modes.all_modes())[0].name for line in ("2.14", "2.21")]
        rows.append(f"| {name} | `{picks[0]}` | `{picks[1]}` |")
    return "\n".join(rows)


def test_the_docs_say_what_auto_picks():
    import pathlib

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "distribution.md").read_text()
    assert auto_table() in page, "docs/distribution.md's table of auto's picks is stale: paste auto_table()'s output"
