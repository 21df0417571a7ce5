"""Hyperparameters arrive as strings (or as the toolkit's JSON-decoded values): parsing
by declared type, and clear errors naming the key and what it accepts."""
import pytest

from trainer.contract.hyperparameters import SPECS, parse_hyperparameters
from trainer.errors import JobError


@pytest.mark.parametrize("raw, key, expected", [
    ({"batch_size": "512"}, "batch_size", 512),
    ({"batch_size": 512}, "batch_size", 512),
    ({"batch_size": "1e3"}, "batch_size", 1000),
    ({"feature_size": "1e6"}, "feature_size", 1_000_000),
    ({"learning_rate": "0.01"}, "learning_rate", 0.01),
    ({"learning_rate": 1}, "learning_rate", 1.0),
    ({"kmp_settings": "False"}, "kmp_settings", False),
    ({"kmp_settings": "false"}, "kmp_settings", False),
    ({"kmp_settings": False}, "kmp_settings", False),
    ({"kmp_settings": "True"}, "kmp_settings", True),
    ({"kmp_settings": "1"}, "kmp_settings", True),
    ({"deep_layers": "256,128,64"}, "deep_layers", [256, 128, 64]),
    ({"deep_layers": "[400, 400]"}, "deep_layers", [400, 400]),
    ({"deep_layers": [32]}, "deep_layers", [32]),
    ({"deep_layers": 32}, "deep_layers", [32]),
    ({"dropout": "0.5,0.5,0.5"}, "dropout", [0.5, 0.5, 0.5]),
    ({"dropout": 0.2}, "dropout", [0.2]),
    ({"optimizer": "Adam"}, "optimizer", "adam"),
    ({"optimizer": "Adagrad"}, "optimizer", "adagrad"),
    ({"optimizer": "GD"}, "optimizer", "sgd"),
    ({"optimizer": "FTRL"}, "optimizer", "ftrl"),
    ({"intra_op_threads": "auto"}, "intra_op_threads", None),
    ({"intra_op_threads": ""}, "intra_op_threads", None),
    ({"intra_op_threads": "4"}, "intra_op_threads", 4),
    ({"data_format": "libsvm"}, "data_format", "libsvm"),
    ({"data_format": "auto"}, "data_format", None),
    ({}, "batch_size", 256),
    ({}, "deep_layers", [256, 128, 64]),
    ({"mixed_precision": "bf16"}, "mixed_precision", "mixed_bfloat16"),
    ({"mixed_precision": "mixed_float16"}, "mixed_precision", "mixed_float16"),
    ({}, "mixed_precision", "none"),
    ({"jit_compile": "true"}, "jit_compile", True),
    ({"profile_steps": "100,110"}, "profile_steps", [100, 110]),
    ({"profile_steps": ""}, "profile_steps", None),
    ({"price_per_hour": "0.408"}, "price_per_hour", 0.408),
    ({}, "price_per_hour", None),
    ({"model_dir": "s3://bucket/prefix/model"}, "batch_size", 256),  # set by the SDK, accepted
])
def test_parses_by_declared_type(raw, key, expected):
    assert parse_hyperparameters(raw)[key] == expected


@pytest.mark.parametrize("raw, message", [
    ({"batch_size": "abc"}, "hyperparameter 'batch_size': expected an integer, got 'abc'; accepted: an integer >= 1"),
    ({"batch_size": "2.5"}, "hyperparameter 'batch_size': expected an integer"),
    ({"batch_size": "0"}, "hyperparameter 'batch_size': '0' is out of range; accepted: an integer >= 1"),
    ({"batch_size": True}, "hyperparameter 'batch_size': expected an integer"),
    ({"learning_rate": "fast"}, "hyperparameter 'learning_rate': expected a number, got 'fast'"),
    ({"learning_rate": "nan"}, "hyperparameter 'learning_rate': expected a finite number"),
    ({"kmp_settings": "maybe"}, "hyperparameter 'kmp_settings': expected a boolean (true/false), got 'maybe'; accepted: true or false"),
    ({"deep_layers": "256,x"}, "hyperparameter 'deep_layers': expected a comma-separated list (expected an integer)"),
    ({"deep_layers": ""}, "hyperparameter 'deep_layers': expected a non-empty comma-separated list"),
    ({"dropout": "1.5"}, "hyperparameter 'dropout': '1.5' is out of range; accepted: a comma-separated list of numbers in [0, 0.99]"),
    ({"optimizer": "rmsprop"}, "hyperparameter 'optimizer': 'rmsprop' is not accepted; accepted: one of adam, adagrad, ftrl, sgd, momentum"),
    ({"data_format": "xml"}, "accepted: one of tfrecord, libsvm, csv, tsv, parquet (or auto)"),
    ({"deep_layers": "64,32", "dropout": "0.1,0.2,0.3"}, "hyperparameter 'dropout': 3 values for 2 deep_layers"),
    ({"deep_layers": '{"a": 1}'}, "hyperparameter 'deep_layers'"),
    ({"train_channel": ["a"]}, "hyperparameter 'train_channel': expected a string"),
    ({"profile_steps": "110,100"}, "hyperparameter 'profile_steps': expected two steps a,b with a <= b, got 110,100"),
    ({"profile_steps": "5"}, "hyperparameter 'profile_steps': expected two steps a,b"),
    ({"mixed_precision": "int8"}, "accepted: one of none, mixed_bfloat16, mixed_float16"),
    ({"price_per_hour": "-1"}, "hyperparameter 'price_per_hour': '-1' is out of range"),
])
def test_bad_values_name_the_key_and_what_is_accepted(raw, message):
    with pytest.raises(JobError) as error:
        parse_hyperparameters(raw)
    assert message in str(error.value)


def test_values_are_data_never_code():
    hp = parse_hyperparameters({"train_channel": "__import__('os').system('false')"})
    assert hp.train_channel == "__import__('os').system('false')"


@pytest.mark.parametrize("raw, has_user_code, warning", [
    ({"bach_size": "64"}, False,
     "unknown hyperparameter 'bach_size' (did you mean 'batch_size'?): ignored: no user code to read it; declared: "),
    ({"_tuning_objective_metric": "eval:auc"}, False,
     "unknown hyperparameter '_tuning_objective_metric': ignored: no user code to read it; declared: "),
    ({"bach_size": "64"}, True, "unknown hyperparameter 'bach_size' (did you mean 'batch_size'?): passed to the user code only"),
    ({"hidden_units": "32"}, True, None),  # the user code's own name: no warning
])
def test_unknown_names_are_warned_about_not_fatal(caplog, raw, has_user_code, warning):
    with caplog.at_level("WARNING"):
        hp = parse_hyperparameters(raw, has_user_code=has_user_code)
    assert hp.extra == raw and hp.batch_size == 256
    warnings = [record.getMessage() for record in caplog.records]
    assert (warnings[0].startswith(warning) if warning else warnings == []), warnings


def test_unknown_names_go_to_a_user_module():
    hp = parse_hyperparameters({"user_module": "my_model", "hidden_units": "32"})
    assert hp.extra == {"hidden_units": "32"}
    assert hp.as_dict()["hidden_units"] == "32" and hp.as_dict()["batch_size"] == 256


def test_unknown_names_go_to_a_script_mode_program():
    assert parse_hyperparameters({"epochs_of_mine": "3"}, has_user_code=True).extra == {"epochs_of_mine": "3"}


def test_explicit_names_are_recorded():
    hp = parse_hyperparameters({"batch_size": "64"})
    assert hp.explicit == {"batch_size"}


def test_every_spec_default_parses_as_itself():
    for spec in SPECS:
        if spec.default is not None:
            assert spec.parse(spec.default) == spec.default, spec.name


def test_the_docs_list_every_hyperparameter():
    import os

    from trainer import modes
    from trainer.contract.hyperparameters import markdown_table

    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "hyperparameters.md")).read()
    assert markdown_table({"distribution": ("auto", *modes.names())}) in page, "docs/hyperparameters.md's table is stale: paste markdown_table()'s output"
