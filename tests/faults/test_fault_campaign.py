"""A property-based campaign of bad input (Hypothesis): config files, hyperparameters, channel
layouts and data files are generated with one fault each, and `train` runs on every one. Each
job must end with exit status 1 and a failure file whose first line names what is wrong and
where (the file, line, key or channel it was given), never a bare exception class or a
traceback, within 60 s.

The examples are the same on every run (derandomized), so a red run repeats as it was; set
FAULT_CAMPAIGN_SEED=<n> to search new ones."""
import functools
import gzip
import json
import os
import re
import shutil
import string
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, note, seed, settings
from hypothesis import strategies as st

from conftest import CRITEO_SAMPLE, shared_file
from test_input_and_config_faults import laid_out, record_ends, run_train
from trainer.contract.hyperparameters import SPECS
from trainer.errors import JobError
from watched import first_line

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one `train` process at a time

ENDS_WITHIN_SEC = 60  # the campaign's bound for every fault, start-up included
# What a message that is only an exception looks like: "KeyError: 'hosts'", "ValueError".
BARE_EXCEPTION = re.compile(r"^\s*([\w.]+\.)?\w*(Error|Exception|Exit)\b(:|$)")
CONFIG_FILES = ("resourceconfig.json", "inputdataconfig.json", "hyperparameters.json")


def campaign(max_examples: int):
    """The campaign's settings: each example is a whole `train` run (seconds, not microseconds)."""
    search_seed = os.environ.get("FAULT_CAMPAIGN_SEED")
    chosen = settings(max_examples=max_examples, deadline=None, database=None, derandomize=search_seed is None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    return (lambda test: seed(int(search_seed))(chosen(test))) if search_seed else chosen


def ends_named(job_dir, *where: str) -> str:
    """`train` on the laid-out job ends as a bad input must; each of `where` is in its first line."""
    run, seconds = run_train(job_dir, timeout=ENDS_WITHIN_SEC)
    note(f"log:\n{run.log[-3000:]}")
    assert run.exit_code == 1, run.log[-3000:]
    line = first_line(run)
    note(f"first line: {line}")
    assert not BARE_EXCEPTION.match(line), line
    assert not run.failure.startswith("Traceback"), run.failure
    for name in where:
        assert name in line, f"{name!r} not named in: {line}"
    assert seconds < ENDS_WITHIN_SEC, (seconds, line)
    return line


def tfrecords_job(folders, aws_split, hyperparameters=None, input_mode="File") -> str:
    """A job on the DeepFM sample's records, laid out in a new folder of `folders` (tmp_path_factory)."""
    return laid_out(folders.mktemp("example") / "job", {"training": [aws_split["training"]]}, hyperparameters,
                    input_mode)


# --- config files ------------------------------------------------------------------------

NOT_AN_OBJECT = st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=8), st.none(),
                          st.booleans())
ODD_VALUES = st.one_of(NOT_AN_OBJECT, st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def break_config(text: str, name: str, fault: str, data) -> bytes:
    if fault == "cut short":
        cut = data.draw(st.integers(1, len(text) - 1), label="cut at")
        return text[:cut].encode()
    if fault == "not UTF-8":
        at = data.draw(st.integers(0, len(text)), label="bad byte at")
        return text[:at].encode() + b"\xff\xfe" + text[at:].encode()
    if fault == "not an object":
        return json.dumps(data.draw(NOT_AN_OBJECT, label="content")).encode()
    config = json.loads(text)
    if name == "resourceconfig.json":
        key = data.draw(st.sampled_from(["hosts", "current_host", "instance_groups"]), label="key")
        if data.draw(st.booleans(), label="remove it"):
            assume(key != "instance_groups")  # optional: one instance type
            del config[key]
        else:
            config[key] = data.draw(ODD_VALUES if key != "hosts" else st.one_of(
                ODD_VALUES, st.just(["algo-1", "algo-1"]), st.lists(st.integers(), min_size=1, max_size=2)),
                label="value")
            assume(not (key == "instance_groups" and config[key] in ([], {}, None, 0, False, "")))  # none
            assume(not (key == "instance_groups" and isinstance(config[key], list)
                        and all(isinstance(group, dict) for group in config[key]) and len(config[key]) < 2))
    else:
        key = data.draw(st.sampled_from(["channel", "TrainingInputMode", "S3DistributionType", "CompressionType",
                                         "RecordWrapperType"]), label="key")
        if key == "channel":
            config["training"] = data.draw(NOT_AN_OBJECT, label="channel's config")
        else:
            value = data.draw(st.text(string.ascii_letters, min_size=1, max_size=10), label="value")
            assume(value not in ("File", "FastFile", "Pipe", "FullyReplicated", "ShardedByS3Key", "None", "Gzip",
                                 "RecordIO"))
            config["training"][key] = value
    return json.dumps(config).encode()


CONFIG_FAULTS = ("cut short", "not UTF-8", "not an object", "a key's value wrong")


@campaign(max_examples=60)  # each a start-up that fails before TensorFlow: half a second
@given(name=st.sampled_from(CONFIG_FILES), fault=st.sampled_from(CONFIG_FAULTS), data=st.data())
def test_a_broken_config_file_is_named(tmp_path_factory, aws_split, name, fault, data):
    assume(not (name == "hyperparameters.json" and fault == "a key's value wrong"))  # any value is taken as text
    job_dir = tfrecords_job(tmp_path_factory, aws_split)
    path = os.path.join(job_dir, "input", "config", name)
    with open(path) as f:
        text = f.read()
    broken = break_config(text, name, fault, data)
    if fault == "cut short":
        assume(not _is_json_object(broken))
    with open(path, "wb") as f:
        f.write(broken)
    ends_named(job_dir, name, *(["'training'"] if name == "inputdataconfig.json" and fault == "a key's value wrong"
                                else []))


def _is_json_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


# --- hyperparameters ---------------------------------------------------------------------

# The hyperparameters a value can be wrong for: typed, or one of a list (distribution: of the
# registered modes, which the planner checks).
CHECKED_SPECS = [spec for spec in SPECS if spec.kind != "str" or spec.choices or spec.name == "distribution"]


def bad_values(spec):
    """Values a user could type that `spec` does not accept (the spec decides, below)."""
    words = st.text(string.ascii_letters + string.punctuation + " ", min_size=1, max_size=12)
    numbers = []
    if spec.minimum is not None:
        numbers.append(st.floats(spec.minimum - 1e6, spec.minimum, exclude_max=True).map(_number_text))
    if spec.maximum is not None:
        numbers.append(st.floats(spec.maximum, spec.maximum + 1e6, exclude_min=True).map(_number_text))
    specials = st.sampled_from(["nan", "inf", "-inf", "1e400", "1.5", "", "[1,", "true", "0x1F", "1,,x"])
    return st.one_of(words, specials, *numbers)


def _number_text(number: float) -> str:
    return str(int(number)) if number.is_integer() else repr(number)


@st.composite
def bad_hyperparameter(draw):
    spec = draw(st.sampled_from(CHECKED_SPECS))
    value = draw(bad_values(spec))
    assume(not accepted_by(spec, value))
    return spec.name, value


def accepted_by(spec, text: str) -> bool:
    """Whether `spec` takes `text` as SageMaker hands it over (the training toolkit decodes a
    value that is JSON, as "1e400" or "true", before the container sees it)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    try:
        parsed = spec.parse(value)
    except JobError:
        return False
    if spec.name == "distribution":
        from trainer.modes import all_modes

        return str(parsed).strip().lower() in {"auto", *(mode.name for mode in all_modes())}
    return True


@campaign(max_examples=80)
@given(bad_hyperparameter())
def test_a_bad_hyperparameter_is_named(tmp_path_factory, aws_split, case):
    name, value = case
    job_dir = tfrecords_job(tmp_path_factory, aws_split, {name: value})
    ends_named(job_dir, f"hyperparameter '{name}'")


# --- channel layouts ---------------------------------------------------------------------

CHANNEL_NAMES = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True).filter(
    lambda name: name not in ("training", "train", "evaluation", "eval", "validation", "model", "code", "test"))


@st.composite
def broken_layout(draw):
    """(how the laid-out folder is broken, another channel or file name)."""
    fault = draw(st.sampled_from(["training channel under another name", "an empty training folder",
                                  "only empty files", "the channel's folder missing", "a Pipe FIFO never made"]))
    other = draw(CHANNEL_NAMES)
    return fault, other


def break_layout(job_dir: str, fault: str, other: str) -> tuple[str, ...]:
    """Breaks the laid-out job; what its failure must name."""
    data_dir = os.path.join(job_dir, "input", "data")
    training = os.path.join(data_dir, "training")
    if fault == "training channel under another name":
        config_path = os.path.join(job_dir, "input", "config", "inputdataconfig.json")
        with open(config_path) as f:
            config = json.load(f)
        config[other] = config.pop("training")
        with open(config_path, "w") as f:
            json.dump(config, f)
        os.rename(training, os.path.join(data_dir, other))
        return "'training'", other
    if fault == "a Pipe FIFO never made":
        return ("training_0",)  # nobody makes it, as when a Pipe channel never starts
    shutil.rmtree(training)
    if fault != "the channel's folder missing":
        os.makedirs(training)
    if fault == "only empty files":
        for name in (f"{other}.tfrecords", f"{other}.part"):
            open(os.path.join(training, name), "w").close()
    return ("'training'",)


@campaign(max_examples=15)
@given(broken_layout())
def test_a_broken_channel_layout_is_named(tmp_path_factory, aws_split, case):
    fault, other = case
    pipe = fault == "a Pipe FIFO never made"
    job_dir = tfrecords_job(tmp_path_factory, aws_split, {"pipe_wait_sec": 2} if pipe else None, "Pipe" if pipe else "File")
    ends_named(job_dir, *break_layout(job_dir, fault, other))


# --- data files --------------------------------------------------------------------------

def criteo_lines() -> list[str]:
    return open(shared_file(CRITEO_SAMPLE)).read().splitlines()  # a header, then 200 rows


@functools.cache
def libsvm_lines() -> tuple[str, ...]:
    """The same rows as libsvm lines (`trainer convert`)."""
    from trainer.data import convert

    with tempfile.TemporaryDirectory() as folder:
        converted = convert.convert([shared_file(CRITEO_SAMPLE)], folder, output_format="libsvm", num_files=1)
        with open(converted["files"][0]) as f:
            return tuple(f.read().splitlines())


NOT_A_NUMBER = st.text(string.ascii_letters + "/?#$%&*()!@", min_size=1, max_size=8).filter(
    lambda text: not _parses_as_float(text))


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


@st.composite
def a_damaged_row(draw):
    """(file name, its lines, the 1-based line that is wrong, what must be named besides)."""
    data_format = draw(st.sampled_from(["csv", "tsv", "libsvm"]))
    lines = criteo_lines()
    row = draw(st.integers(1, len(lines) - 1), label="row")
    if data_format == "libsvm":
        lines = list(libsvm_lines())
        row = min(row, len(lines)) - 1  # no header: 0-based
        tokens = lines[row].split()
        at = draw(st.integers(1, len(tokens) - 1), label="token")
        tokens[at] = draw(st.one_of(NOT_A_NUMBER, st.builds("{}:{}".format, st.integers(0, 99), NOT_A_NUMBER)),
                          label="token")
        lines[row] = " ".join(tokens)
        return "day_0.libsvm", lines, row + 1, ()
    separator = "," if data_format == "csv" else "\t"
    header = lines[0].split(",")
    fields = lines[row].split(",")
    fault = draw(st.sampled_from(["a column missing", "a column too many", "a number that is not one"]))
    named = ()
    if fault == "a column missing":
        del fields[draw(st.integers(0, len(fields) - 1), label="column")]
    elif fault == "a column too many":
        fields.insert(draw(st.integers(0, len(fields)), label="at"), draw(st.text("0123456789", max_size=3)))
    else:
        column = draw(st.integers(1, 13), label="numeric column")  # I1..I13
        fields[column] = draw(NOT_A_NUMBER, label="value")
        named = (header[column],)
    lines = [line.replace(",", separator) for line in lines]
    lines[row] = separator.join(fields)
    return f"day_0.{data_format}", lines, row + 1, named


@campaign(max_examples=12)
@given(a_damaged_row())
def test_a_damaged_row_is_named_by_file_and_line(tmp_path_factory, case):
    name, lines, line_number, named = case
    job_dir = job_on_file(tmp_path_factory, name, ("\n".join(lines) + "\n").encode())
    ends_named(job_dir, "'training'", name, f"line {line_number}", *named)


def job_on_file(folders, name: str, data: bytes) -> str:
    """A job whose training channel is the one file `name`, holding `data`."""
    folder = folders.mktemp("example")
    (folder / name).write_bytes(data)
    return laid_out(folder / "job", {"training": [str(folder / name)]}, {"batch_size": 16, "num_epochs": 1})


@st.composite
def a_file_cut_short(draw):
    """(file name, its bytes, cut short where no record or row ends)."""
    kind = draw(st.sampled_from(["tfrecords", "libsvm.gz", "csv.gz", "parquet"]))
    lines = criteo_lines()
    if kind == "tfrecords":
        from conftest import AWS_DEEPFM

        whole = open(shared_file(AWS_DEEPFM), "rb").read()
    elif kind == "csv.gz":
        whole = gzip.compress(("\n".join(lines) + "\n").encode())
    elif kind == "libsvm.gz":
        whole = gzip.compress(("\n".join(libsvm_lines()) + "\n").encode())
    else:
        import io

        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        sink = io.BytesIO()
        pq.write_table(pcsv.read_csv(io.BytesIO("\n".join(lines).encode())), sink, row_group_size=50)
        whole = sink.getvalue()
    cut = draw(st.integers(1, len(whole) - 1), label="cut at")
    if kind == "tfrecords":
        assume(cut not in record_ends(whole))
    return f"cut.{kind}", whole[:cut]


@campaign(max_examples=12)
@given(a_file_cut_short())
def test_a_file_cut_short_is_named(tmp_path_factory, case):
    name, data = case
    job_dir = job_on_file(tmp_path_factory, name, data)
    ends_named(job_dir, "'training'", name)
