"""Declared hyperparameters and their parsing.

SageMaker hands every hyperparameter over as a string ("False", "256,128,64"); the
toolkit's reader JSON-decodes what it can ("0.5" -> 0.5, "false" -> False) and leaves the
rest as strings. Each value is parsed here by its declared type, so both spellings mean
the same thing, and a bad value is an error that names the key and what it accepts.
No value is ever evaluated as code.
"""
from __future__ import annotations

import difflib
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from trainer.contract.values import parse_bool
from trainer.errors import JobError
from trainer.report import STOP_GRACE_SEC

log = logging.getLogger(__name__)

AUTO = "auto"


def _is_auto(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", AUTO))


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:  # "1e6" is a common way to write a feature count
        number = float(text)
    except ValueError:
        raise ValueError("expected an integer") from None
    if not number.is_integer():
        raise ValueError("expected an integer")
    return int(number)


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def _parse_list(item_parser: Callable[[Any], Any]) -> Callable[[Any], list]:
    def parse(value: Any) -> list:
        if isinstance(value, (list, tuple)):
            items = list(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            items = [value]
        else:
            text = str(value).strip()
            if text.startswith("["):
                try:
                    items = json.loads(text)
                except json.JSONDecodeError:
                    raise ValueError("expected a comma-separated list") from None
            else:
                items = [part for part in text.split(",") if part.strip()]
        if not items:
            raise ValueError("expected a non-empty comma-separated list")
        try:
            return [item_parser(item) for item in items]
        except ValueError as err:
            raise ValueError(f"expected a comma-separated list ({err})") from None

    return parse


def _parse_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError("expected a string")
    return str(value)


PARSERS: dict[str, Callable[[Any], Any]] = {
    "bool": parse_bool,
    "int": _parse_int,
    "float": _parse_float,
    "str": _parse_str,
    "int_list": _parse_list(_parse_int),
    "float_list": _parse_list(_parse_float),
}

KIND_TEXT = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "int_list": "a comma-separated list of integers",
    "float_list": "a comma-separated list of numbers",
}


@dataclass(frozen=True)
class Spec:
    """One declared hyperparameter."""

    name: str
    kind: str  # a key of PARSERS
    default: Any
    help: str
    group: str = "training"
    choices: tuple[str, ...] = ()  # the accepted values
    minimum: float | None = None
    maximum: float | None = None
    allow_auto: bool = False  # "auto" (or empty) means: decided from the job at run time
    aliases: Mapping[str, str] = field(default_factory=dict)  # accepted spelling -> choice

    def accepted(self, choices: tuple[str, ...] = ()) -> str:
        """What it accepts, in words (`choices`: its values where another part of the package
        checks them)."""
        if self.choices or choices:
            text = "one of " + ", ".join(self.choices or choices)
        else:
            text = KIND_TEXT[self.kind]
            if self.minimum is not None and self.maximum is not None:
                text += f" in [{_fmt(self.minimum)}, {_fmt(self.maximum)}]"
            elif self.minimum is not None:
                text += f" >= {_fmt(self.minimum)}"
            elif self.maximum is not None:
                text += f" <= {_fmt(self.maximum)}"
        if self.allow_auto:
            text += " (or auto)"
        return text

    def parse(self, raw: Any) -> Any:
        if self.allow_auto and _is_auto(raw):
            return None
        try:
            value = PARSERS[self.kind](raw)
        except ValueError as err:
            raise JobError(
                f"hyperparameter '{self.name}': {err}, got {raw!r}; accepted: {self.accepted()}"
            ) from None
        if self.choices:
            key = str(value).strip().lower()
            value = self.aliases.get(key, key)
            if value not in self.choices:
                raise JobError(
                    f"hyperparameter '{self.name}': {raw!r} is not accepted; "
                    f"accepted: {self.accepted()}"
                )
        for number in value if isinstance(value, list) else [value]:
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                if (self.minimum is not None and number < self.minimum) or (
                    self.maximum is not None and number > self.maximum
                ):
                    raise JobError(
                        f"hyperparameter '{self.name}': {raw!r} is out of range; "
                        f"accepted: {self.accepted()}"
                    )
        return value


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)



# The container's own settings: a user's training script is not given them as arguments
# (argparse rejects names it does not know); every other hyperparameter goes to it.
CONTAINER_ONLY = frozenset({
    "entry_point_kind", "distribution", "processes_per_host", "mpi_options", "stop_grace_sec", "peer_wait_sec",
    "intra_op_threads", "inter_op_threads", "omp_num_threads", "kmp_affinity", "kmp_blocktime", "kmp_settings",
    "horovod_autotune", "horovod_fusion_threshold", "horovod_cycle_time", "price_per_hour", "pipe_wait_sec",
    "allow_pin_changes", "ps_worker_grace_sec", "stall_timeout_sec", "training_groups", "data_hosts_run",
    "average_every_steps", "probe_scaling",
})

SPECS: tuple[Spec, ...] = (
    # DeepFM (names as in the DeepFM distributed-training sample, so its users can switch)
    Spec("field_size", "int", 39, "Fields per example (length of `ids` and `values`); CSV, TSV and Parquet: "
         "the numeric and categorical columns, counted (leave it unset).", group="model", minimum=1),
    Spec("feature_size", "int", 117581, "Number of distinct feature ids (rows of the embedding table).",
         group="model", minimum=1),
    Spec("embedding_size", "int", 8, "Embedding width of each feature (FM factor size).",
         group="model", minimum=1),
    Spec("deep_layers", "int_list", [256, 128, 64], "Units of the MLP's hidden layers.",
         group="model", minimum=1),
    Spec("dropout", "float_list", [0.5], "Dropout rate of each MLP layer (one value applies to all).",
         group="model", minimum=0.0, maximum=0.99),
    Spec("l2_reg", "float", 1e-3, "L2 penalty on the MLP weights and on the embedding rows a batch uses.",
         group="model", minimum=0.0),
    Spec("optimizer", "str", "adam", "Optimizer; all update embedding rows sparsely "
         "(adam is a lazy Adam: only the rows a batch touches).",
         choices=("adam", "adagrad", "ftrl", "sgd", "momentum"),
         aliases={"gd": "sgd", "lazyadam": "adam", "lazy_adam": "adam"}),
    Spec("learning_rate", "float", 0.001, "Learning rate.", minimum=0.0),
    Spec("batch_size", "int", 256, "Examples per batch (per process).", minimum=1),
    Spec("num_epochs", "int", 3, "Passes over the training data.", minimum=1),
    Spec("log_steps", "int", 100, "Log loss and samples/sec every this many steps.", minimum=1),
    Spec("shuffle_buffer", "int", 10000, "Records shuffled together: each window of this many is "
         "parsed at once and shuffled anew every epoch (0: no shuffling).", minimum=0),
    Spec("seed", "int", 42, "Seed for initialisation and shuffling.", minimum=0),
    Spec("model_version", "int", 1, "Version folder of the exported SavedModel: model/<version>/.",
         minimum=0),
    Spec("keep_checkpoints", "int", 3, "Checkpoints kept in the checkpoint dir.", minimum=1),
    Spec("init_from", "str", "auto", "What a new job starts from (a restarted job always resumes its own "
         "checkpoint): auto: the model channel, else the newest checkpoint another job left in the checkpoint "
         "dir, else nothing; checkpoint: that checkpoint only; model: the model channel (required); none: "
         "nothing. Starting from another job's model loads its weights (and optimizer state) and trains this "
         "job's num_epochs from step 0 (docs/daily-retraining.md).", choices=("auto", "checkpoint", "model", "none")),
    Spec("model_channel", "str", "model", "Name of the channel holding a previous job's model.tar.gz or "
         "SavedModel folder (the SDKs' model_channel_name).", group="input"),
    Spec("stall_timeout_sec", "float", 900.0, "A process that makes no training or evaluation step "
         "for this long logs every thread's stack, names itself and its last step in the failure "
         "file and ends the job. A script's rank: one that Horovod's stall check names as missing, "
         "or whose processes use almost no CPU (under 1% of a core), for this long; each rank's "
         "stack goes below the reason (docs/faults.md).", minimum=1.0),
    Spec("save_timeout_sec", "float", 3600.0, "The same limit for saving a checkpoint or exporting "
         "the model (no steps while it lasts; logged every minute).", minimum=1.0),
    Spec("mixed_precision", "str", "none", "Keras mixed precision (P20): float32 variables, "
         "compute in bfloat16 or float16 (float16 with dynamic loss scaling).",
         choices=("none", "mixed_bfloat16", "mixed_float16"),
         aliases={"bf16": "mixed_bfloat16", "bfloat16": "mixed_bfloat16", "fp16": "mixed_float16",
                  "float16": "mixed_float16", "float32": "none", "false": "none"}),
    Spec("jit_compile", "bool", False, "Compile the training step with XLA (P21)."),
    Spec("steps_per_execution", "int", None, "Training steps per call into TensorFlow (Keras' "
         "steps_per_execution: Python's per-step cost paid once per call), in single, horovod, local_sgd (a "
         "call's steps divide average_every_steps) and parameter_server (a call's steps on one worker); auto: 32, "
         "at most log_steps (1 while profiling and in the other modes).", minimum=1, allow_auto=True),
    Spec("profile_steps", "int_list", None, "Trace steps a,b (e.g. 100,110) with TensorFlow's profiler "
         "into the job's TensorBoard folder, run profile (TensorBoard's Profile tab); auto: off.", minimum=1,
         allow_auto=True),
    Spec("price_per_hour", "float", None, "USD per instance-hour, for samples per dollar; auto: "
         "SageMaker's us-east-1 On-Demand training price of the instance type (built-in table).",
         minimum=0.0, allow_auto=True),
    # Input
    Spec("data_format", "str", None, "Record format of the channels; auto: the channel's ContentType (text/csv, "
         "text/tab-separated-values, application/x-parquet, text/libsvm, application/x-tfrecord), else the files' "
         "suffixes (.csv, .tsv, .parquet, .libsvm, .tfrecord; .gz too), else their content (Parquet's magic, "
         "TFRecord's framing, a text line's shape); Pipe mode without either: tfrecord.",
         group="input", choices=("tfrecord", "libsvm", "csv", "tsv", "parquet"), allow_auto=True),
    Spec("label_column", "str", None, "CSV, TSV and Parquet: the label's column, by name (a header or a schema) "
         "or 0-based position; auto: label where the files name their columns Criteo's way, else column 0.",
         group="input", allow_auto=True),
    Spec("numeric_columns", "str", None, "CSV, TSV and Parquet: the numeric columns, each a field of its own "
         "(names or 0-based positions, comma-separated; I1..I13 and 1..13 are ranges; none); auto: I1..I13 where "
         "the files name them, else columns 1..13.", group="input", allow_auto=True),
    Spec("categorical_columns", "str", None, "CSV, TSV and Parquet: the categorical columns, each hashed into "
         "ids of its own in the graph (as numeric_columns); auto: C1..C26 where the files name them, else "
         "columns 14..39.", group="input", allow_auto=True),
    Spec("numeric_transform", "str", "log1p", "CSV, TSV and Parquet: what a numeric column's value x becomes; "
         "log1p: log(1 + max(x, 0)); none: x; a missing value is 0 either way.", group="input",
         choices=("log1p", "none")),
    Spec("train_channel", "str", "training", "Name of the training channel (also accepted: train).",
         group="input"),
    Spec("eval_channel", "str", None, "Name of the evaluation channel; auto: the first of "
         "evaluation, eval, validation, test that exists.", group="input", allow_auto=True),
    Spec("cache_input", "str", "auto", "Cache the parsed input in memory after the first epoch; "
         "auto: in File mode when the channel is under 1/4 of RAM.",
         group="input", choices=("auto", "true", "false")),
    Spec("skip_bad_records", "bool", False, "Drop malformed libsvm lines, CSV and TSV lines of another width "
         "or with a label or numeric value that is not a number, Parquet rows without a label, and records with "
         "ids outside [0, feature_size); count them in the log and metrics.json, and train on; false: the job "
         "fails naming the file and line (built-in parser only).", group="input"),
    Spec("pipe_wait_sec", "float", 600.0, "How long to wait for a Pipe-mode FIFO to appear before "
         "the job fails.", group="input", minimum=1.0),
    Spec("pipe_reader", "str", "auto", "Reader of Pipe-mode FIFOs; auto: AWS's PipeModeDataset where "
         "sagemaker-tensorflow is installed (the image), else the project's own; parameter-server workers "
         "always read theirs with the project's own, in the worker task.",
         group="input", choices=("auto", "pipemodedataset", "project")),
    Spec("user_module", "str", "", "Import name or .py path of a module with hooks "
         "(model_fn, parse_fn, optimizer_fn) replacing the built-in DeepFM.", group="input"),
    Spec("entry_point_kind", "str", "auto", "What sagemaker_program is; auto: hooks if it defines "
         "model_fn(hp), parse_fn(serialized, hp) or optimizer_fn(hp) at its top level and runs nothing "
         "when imported (no __main__ guard, no top-level call), else a training script run as AWS's "
         "TensorFlow container runs it (decided from its source; trainer plan says why).",
         group="input", choices=("auto", "hooks", "script")),
    Spec("allow_pin_changes", "bool", False, "Let a script's requirements.txt change a package the image's "
         "TensorFlow, Horovod and tensorflow-io were built against (TensorFlow, Keras, numpy, protobuf, Horovod, "
         "mpi4py, tensorflow-io, sagemaker-training, sagemaker-tensorflow); false: such a line fails the job "
         "before training, naming it.", group="input"),
    # Distribution: decided by the planner from the job; these override its choices
    # Its values are auto and the registered modes' names, which the planner checks (trainer.plan.auto).
    Spec("distribution", "str", "auto", "How to use the job's hosts and devices; auto: from the "
         "SageMaker SDK's distribution keys, else from hosts, GPUs and CPUs (trainer plan says why).",
         group="distribution"),
    Spec("processes_per_host", "int", None, "Training processes per host (horovod); auto: the "
         "SDK's sagemaker_mpi_num_of_processes_per_host, else one per GPU, else 1.",
         group="distribution", minimum=1, allow_auto=True),
    Spec("replicas", "int", None, "Replicas in one process (tower, mirrored); auto: the GPUs, "
         "else the vCPUs minus the one kept for the reduction (at least 2).",
         group="distribution", minimum=1, allow_auto=True),
    Spec("scale_learning_rate", "bool", True, "Multiply learning_rate by the number of synchronous "
         "replicas (P7); batch_size stays per replica.", group="distribution"),
    Spec("warmup_steps", "int", 100, "Steps over which a scaled learning rate ramps up from "
         "learning_rate (P7).", group="distribution", minimum=0),
    Spec("horovod_module", "str", "horovod.tensorflow.keras", "Import name of the Horovod Keras "
         "API (or a compatible runtime).", group="distribution"),
    Spec("horovod_autotune", "bool", False, "HOROVOD_AUTOTUNE (P27).", group="distribution"),
    Spec("horovod_fusion_threshold", "int", None, "HOROVOD_FUSION_THRESHOLD in bytes (P27); "
         "auto: Horovod's default.", group="distribution", minimum=0, allow_auto=True),
    Spec("horovod_cycle_time", "float", None, "HOROVOD_CYCLE_TIME in ms (P27); auto: for CPU ranks with "
         "a CPU each 0.1 (docs/modes-measured.md, Scaling out, per core), else Horovod's default. Not read by "
         "local_sgd, whose ranks average over MPI without Horovod.",
         group="distribution", minimum=0.0, allow_auto=True),
    Spec("average_every_steps", "int", 64, "local_sgd: steps each rank trains on its own between two "
         "averages of the ranks' variables (each average is sent while the next ones train).",
         group="distribution", minimum=1),
    Spec("probe_scaling", "bool", False, "Multi-host CPU jobs of the container's model: before training, "
         "the first host measures one host's step and the mode's step as two hosts run it, as "
         "`trainer plan --probe` does (under a minute; the other hosts wait), and logs whether the job's "
         "hosts train faster and cheaper than one.", group="distribution"),
    Spec("mpi_options", "str", "", "Extra mpirun options (added to the SDK's "
         "sagemaker_mpi_custom_mpi_options).", group="distribution"),
    Spec("stop_grace_sec", "float", STOP_GRACE_SEC, "After a SIGTERM (a stop, a spot interruption): how long "
         "training may take to reach a step boundary and save, and a user's script to end, before it is "
         "killed; keep it under the two minutes SageMaker leaves after a spot notice.",
         group="distribution", minimum=1.0),
    Spec("ps_worker_grace_sec", "float", 30.0, "Parameter servers with a user's script: once the master's "
         "script has ended, how long each worker host's script may take to end by itself (an Estimator's worker "
         "returns once it sees the last step; every host's parameter server keeps serving meanwhile) before it is "
         "stopped, as a TF 2 worker that serves until stopped is.", group="distribution", minimum=0.0),
    Spec("training_groups", "str", "auto", "Heterogeneous clusters: the instance groups that train (names, "
         "comma-separated); the other groups feed them through tf.data service. auto: the SDK's distribution "
         "instance_groups, else the groups of GPU instance types (trainer plan says which and why).",
         group="distribution"),
    Spec("data_hosts_run", "str", "service", "Heterogeneous clusters with a user's script: what the hosts of the "
         "groups that do not train run; service: the container's tf.data service dispatcher and workers (the "
         "script's training reads through them, e.g. with trainer.kit.from_data_service); script: the script "
         "itself, as in AWS's container, which then starts what it needs.", group="distribution",
         choices=("service", "script")),
    Spec("peer_wait_sec", "float", 300.0, "Multi-host jobs: how long each host waits for the "
         "others to resolve and answer (their train, parameter-server tasks, sshd) before the job fails "
         "naming the ones missing; logged every 10 s while it lasts. Also how long a host whose part "
         "succeeded waits for the others' parts to end, so that the job's hosts end together.",
         group="distribution", minimum=1.0),
    # CPU (P17): auto values are derived from the job's CPUs at start and logged
    Spec("intra_op_threads", "int", None, "TensorFlow intra-op threads; auto: the vCPUs per process minus one (left to the input pipeline).",
         group="cpu", minimum=0, allow_auto=True),
    Spec("inter_op_threads", "int", None, "TensorFlow inter-op threads; auto: 2.",
         group="cpu", minimum=0, allow_auto=True),
    Spec("omp_num_threads", "int", None, ("OMP_NUM_THREADS for oneDNN on Intel OpenMP (the 2.14 line; the 2.21 line's "
         "stock TensorFlow does not read it or the KMP_* settings); auto: physical cores per process minus one."),
         group="cpu", minimum=1, allow_auto=True),
    Spec("kmp_affinity", "str", None, "KMP_AFFINITY; auto: granularity=fine,compact,1,0, "
         "or disabled where a process has one OpenMP thread.",
         group="cpu", allow_auto=True),
    Spec("kmp_blocktime", "int", None, "KMP_BLOCKTIME in ms; auto: 1.",
         group="cpu", minimum=0, allow_auto=True),
    Spec("kmp_settings", "bool", False, "KMP_SETTINGS: print the OpenMP settings at start.", group="cpu"),
    Spec("tune_threads", "bool", False, "Before training, measure thread and OpenMP settings on the job's "
         "model and data (trainer tune) and train with the best; one-process modes, File mode.", group="cpu"),
    Spec("tune_seconds", "float", 120.0, "Time budget of tune_threads' search.", group="cpu", minimum=10.0),
)

SPEC_BY_NAME = {spec.name: spec for spec in SPECS}

# Set by the SageMaker Python SDK in script mode; accepted and not used by the trainer
# (the model is written to SM_MODEL_DIR, as SageMaker uploads that folder).
PASSED_THROUGH = ("model_dir",)


class Hyperparameters(Mapping[str, Any]):
    """Parsed hyperparameters: declared ones by attribute (hp.batch_size), plus `extra`,
    the undeclared ones a user module may read."""

    def __init__(self, values: dict[str, Any], explicit: set[str], extra: dict[str, Any]):
        self._values = values
        self.explicit = frozenset(explicit)  # names the job set (others are defaults)
        self.extra = dict(extra)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def as_dict(self) -> dict[str, Any]:
        return {**self.extra, **self._values}

    def with_value(self, name: str, value: Any) -> "Hyperparameters":
        """A copy with one declared hyperparameter set (as the planner decides it)."""
        return Hyperparameters({**self._values, name: value}, set(self.explicit) | {name}, self.extra)


def parse_hyperparameters(raw: Mapping[str, Any], has_user_code: bool = False,
                          for_script: bool = False) -> Hyperparameters:
    """Parse the job's non-`sagemaker_` hyperparameters by their declared types.

    Unknown names are logged as a warning naming the closest declared one (a typo keeps the
    default, and the log says so); they are not an error, since SageMaker adds names of its
    own (a tuning job's `_tuning_objective_metric`) and user code (`user_module`, or a
    hooks module as `sagemaker_program`) reads its own names from `extra`.

    `for_script`: every hyperparameter goes to the user's training script as an argument;
    the script owns the names, so one of ours it spells another way (its own `optimizer`)
    keeps our default, with a note, instead of ending the job.
    """
    raw = {key: value for key, value in raw.items() if key not in PASSED_THROUGH}
    has_user_code = has_user_code or bool(str(raw.get("user_module", "")).strip())
    values: dict[str, Any] = {}
    for spec in SPECS:
        if for_script and spec.name in raw:
            try:
                values[spec.name] = spec.parse(raw[spec.name])
            except JobError as err:
                log.info("%s: passed to the script only (the container keeps %r)", err, spec.default)
                values[spec.name] = spec.default
        else:
            values[spec.name] = spec.parse(raw[spec.name]) if spec.name in raw else spec.default
    extra = {key: value for key, value in raw.items() if key not in SPEC_BY_NAME}
    for key in sorted(extra):
        if for_script or (has_user_code and not difflib.get_close_matches(key, SPEC_BY_NAME, n=1)):
            continue  # the user code's own name
        log.warning("%s", unknown_name_warning(key, has_user_code))
    if not for_script:
        _check_consistency(values)  # of the built-in model's settings, which a script does not use
    return Hyperparameters(values, set(raw) & set(SPEC_BY_NAME), extra)


def unknown_name_warning(key: str, has_user_code: bool) -> str:
    hint = difflib.get_close_matches(key, SPEC_BY_NAME, n=1)
    did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
    use = "passed to the user code only" if has_user_code else "ignored: no user code to read it"
    return (f"unknown hyperparameter '{key}'{did_you_mean}: {use}; declared: "
            + ", ".join(spec.name for spec in SPECS))


def _check_consistency(values: dict[str, Any]) -> None:
    layers, dropout = values["deep_layers"], values["dropout"]
    if len(dropout) not in (1, len(layers)):
        raise JobError(
            f"hyperparameter 'dropout': {len(dropout)} values for {len(layers)} deep_layers; "
            "accepted: one value, or one per layer"
        )
    steps = values["profile_steps"]
    if steps is not None and (len(steps) != 2 or steps[0] > steps[1]):
        raise JobError(f"hyperparameter 'profile_steps': expected two steps a,b with a <= b, "
                       f"got {','.join(map(str, steps))}")


def markdown_table(choices: Mapping[str, tuple[str, ...]]) -> str:
    """The hyperparameter table of docs/hyperparameters.md (a test keeps the two the same), with
    `choices` of the hyperparameters checked elsewhere (`distribution`: by the planner);
    pitfall numbers link to docs/pitfalls.md."""
    lines = ["| name | type | default | accepted | what it does |", "|---|---|---|---|---|"]
    for spec in SPECS:
        default = spec.default
        if isinstance(default, list):
            default = ",".join(str(x) for x in default)
        elif default is None:
            default = "auto"
        elif isinstance(default, bool):
            default = str(default).lower()
        described = re.sub(r"\bP(\d+)\b", r"[P\1](pitfalls.md#p\1)", spec.help)
        lines.append(f"| `{spec.name}` | {spec.kind} | `{default}` | {spec.accepted(choices.get(spec.name, ()))} | {described} |")
    return "\n".join(lines)
