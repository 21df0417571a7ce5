"""Hooks: what a user module may replace, so users bring a model, not a training script.

A user module (hyperparameter `user_module`, or the SDK's entry point, `sagemaker_program` in
`sagemaker_submit_directory`, when it defines a hook: trainer.contract.user_code) may define any of:

    def model_fn(hyperparameters: dict) -> tf.keras.Model
        # outputs P(label = 1), shape [batch, 1]; its inputs are named like parse_fn's features
    def parse_fn(serialized: tf.Tensor, hyperparameters: dict) -> (features: dict, label)
        # serialized: string[n] of TFRecord records or libsvm lines (a window of the input,
        # not a batch), parsed at once; every tensor returned has the record axis first
    def optimizer_fn(hyperparameters: dict) -> tf.keras optimizer

What it leaves out falls back to the built-in DeepFM, its record layout and the sparse
optimizers. `hyperparameters` holds the declared hyperparameters and the module's own.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from trainer.contract.user_code import HOOK_NAMES
from trainer.errors import JobError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hooks:
    source: str  # "built-in DeepFM" or the module's name
    model_fn: Callable
    parse_fn: Callable  # (InputSpec) -> window parser
    optimizer_fn: Callable
    custom_parse: bool
    bad_records: object = None  # trainer.data.records.BadRecords with skip_bad_records
    provided: tuple[str, ...] = ()  # the hooks the user's module provides

    def written_by(self, hp, job_name: str | None) -> dict:
        """What a checkpoint or export records of what made it: the job, the built-in model's
        shape (None for the user's model), the optimizer (by name)."""
        from trainer.contract.checkpoint_folder import MODEL_SHAPE

        model = None if "model_fn" in self.provided else {name: hp[name] for name in MODEL_SHAPE}
        optimizer = "optimizer_fn" if "optimizer_fn" in self.provided else hp.optimizer
        return {"job": job_name, "model": model, "optimizer": optimizer}


def _import_path(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise JobError(f"user module file {path} does not exist")
    name = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)  # so the module can import its neighbours
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_user_module(job) -> ModuleType | None:
    name = job.hyperparameters.user_module.strip()
    try:
        if name:
            if name.endswith(".py") or os.sep in name:
                return _import_path(name)
            return importlib.import_module(name)
        if job.entry_point and not job.entry_point.is_script:
            return _import_path(job.entry_point.path)
    except JobError:
        raise
    except Exception as err:  # ImportError, SyntaxError, or whatever its top level raises
        raise JobError(f"user module {name or job.entry_point.program!r} cannot be imported: "
                       f"{type(err).__name__}: {err}") from err
    return None


def load_hooks(job, learning_rate) -> Hooks:
    """The hooks in force; `learning_rate` is the plan's (a float, or a warm-up schedule)."""
    from trainer.data.records import BadRecords
    from trainer.models.deepfm import model_from_hyperparameters
    from trainer.models.optimizers import make_optimizer

    module = load_user_module(job)
    user = {name: getattr(module, name, None) for name in HOOK_NAMES} if module else {}
    if module is not None and not any(user.values()):
        raise JobError(f"user module {module.__name__!r} defines none of {', '.join(HOOK_NAMES)}")
    hp = job.hyperparameters
    as_dict = hp.as_dict()
    # The user's hooks see the learning rate scaled for the job's replicas (P7).
    as_dict["learning_rate"] = float(learning_rate if isinstance(learning_rate, (int, float))
                                     else learning_rate.peak)

    def model_fn():
        return user["model_fn"](as_dict) if user.get("model_fn") else model_from_hyperparameters(hp)

    bad_records = BadRecords(hp.field_size, hp.feature_size) if hp.skip_bad_records else None

    def parse_fn(spec):
        if user.get("parse_fn"):
            if spec.is_parquet:
                raise JobError(f"channel '{spec.name}' is Parquet ({spec.format_why}): its rows reach the model as "
                               f"columns, not as the serialized records parse_fn takes; drop parse_fn from "
                               f"{module.__name__} (the container maps the columns: label_column, numeric_columns, "
                               "categorical_columns), or give the channel TFRecord, libsvm or CSV files")
            return lambda serialized: user["parse_fn"](serialized, as_dict)
        return spec.parser(hp.field_size, hp.feature_size, bad_records)

    def optimizer_fn():
        if user.get("optimizer_fn"):
            return user["optimizer_fn"](as_dict)
        return make_optimizer(hp.optimizer, learning_rate)

    source = module.__name__ if module else "built-in DeepFM"
    if module:
        log.info("user module %s provides: %s", source, ", ".join(n for n, f in user.items() if f))
    custom_parse = bool(user.get("parse_fn"))
    return Hooks(source, model_fn, parse_fn, optimizer_fn, custom_parse, None if custom_parse else bad_records,
                 tuple(name for name, hook in user.items() if hook))
