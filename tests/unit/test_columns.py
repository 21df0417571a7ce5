"""Which columns a raw table trains on (the mapping), and their features in the graph."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.data import diagnose, raw_features
from trainer.data.columns import CRITEO_NAMES, Column, ColumnSpec, nominal, parse_refs, resolve_columns
from trainer.errors import JobError

CRITEO_HEADER = CRITEO_NAMES


@pytest.mark.parametrize("text, refs", [
    (None, None),
    ("none", ()),
    ("I1..I3", ("I1", "I2", "I3")),
    ("1..3,7", (1, 2, 3, 7)),
    ("clicked", ("clicked",)),
    (" a , 4 ,b ", ("a", 4, "b")),
    ("f_2..f_4", ("f_2", "f_3", "f_4")),
])
def test_column_refs(text, refs):
    assert parse_refs(text, "numeric_columns") == refs


def test_a_backward_range_is_named():
    with pytest.raises(JobError, match="hyperparameter 'numeric_columns': range 'I5..I2' runs backwards"):
        parse_refs("I5..I2", "numeric_columns")


def placed(mapping):
    return ((mapping.label.name, mapping.label.position), [(c.name, c.position) for c in mapping.numeric],
            [(c.name, c.position) for c in mapping.categorical], mapping.width)


@pytest.mark.parametrize("spec, names, width, label, numeric, categorical, out_width", [
    # Criteo's layout by name, in any order the header has it
    (ColumnSpec(), CRITEO_HEADER, 40, ("label", 0), 13, 26, 40),
    (ColumnSpec(), tuple(reversed(CRITEO_HEADER)), 40, ("label", 39), 13, 26, 40),
    # ... by position where there is no header: Criteo's names
    (ColumnSpec(), None, 40, ("label", 0), 13, 26, 40),
    (ColumnSpec(), None, None, ("label", 0), 13, 26, 40),  # Pipe mode: the width follows from the columns
    # a header with other names: still Criteo's positions
    (ColumnSpec(), tuple(f"x{i}" for i in range(42)), 42, ("x0", 0), 13, 26, 42),
    # named columns of another layout
    (ColumnSpec(("click",), ("age", "price"), ("city",)), ("id", "click", "age", "city", "price"), 5,
     ("click", 1), 2, 1, 5),
    # positions without a header: column_<p>
    (ColumnSpec((3,), (0,), (1, 2)), None, 4, ("column_3", 3), 1, 2, 4),
    (ColumnSpec(None, (), None), CRITEO_HEADER, 40, ("label", 0), 0, 26, 40),
])
def test_resolve(spec, names, width, label, numeric, categorical, out_width):
    mapping = resolve_columns(spec, names, width, "file a.csv")
    assert (mapping.label.name, mapping.label.position) == label
    assert (len(mapping.numeric), len(mapping.categorical), mapping.width) == (numeric, categorical, out_width)
    assert mapping.field_size == spec.field_size


def test_criteo_by_name_and_by_position_agree_on_names():
    by_name = resolve_columns(ColumnSpec(), CRITEO_HEADER, 40, "x")
    by_position = resolve_columns(ColumnSpec(), None, 40, "x")
    assert placed(by_name) == placed(by_position) and by_name.by_name and not by_position.by_name


@pytest.mark.parametrize("spec, names, width, message", [
    (ColumnSpec(("click",)), None, 40, r"file a.csv: label_column name columns, but it has no header: give 0-based "
                                       r"positions"),
    (ColumnSpec(("click",)), ("label", "I1"), 2, r"it has no column 'click' \(label_column\); its columns: "
                                                 r"label, I1"),
    (ColumnSpec(), None, 39, r"numeric_columns \(auto: Criteo's layout.*\) asks for column 1|categorical_columns "
                             r"\(auto: Criteo's layout, label, I1..I13, C1..C26 at 0..39\) asks for column 39 "
                             r"\(0-based\), but its rows have 39 columns"),
    (ColumnSpec((0,), (1, 2), (2,)), None, 3, r"column column_2 is given twice \(numeric_columns and "
                                              r"categorical_columns\)"),
])
def test_what_does_not_fit_is_named(spec, names, width, message):
    with pytest.raises(JobError, match=message):
        resolve_columns(spec, names, width, "file a.csv")


def test_nominal_mapping_names_the_columns_in_order():
    mapping = nominal(ColumnSpec(("click",), ("a", 4), None))
    assert mapping.label == Column("click", 0)
    assert [c.name for c in mapping.numeric] == ["a", "column_4"]
    assert [c.name for c in mapping.categorical][:2] == ["C1", "C2"] and mapping.width == 29


MAPPING = resolve_columns(ColumnSpec(None, (1, 2), (3, 4)), None, 5, "x")


def test_features_of_a_row():
    columns = {"label": tf.constant([1.0, 0.0]), "numeric": tf.constant([[3.0, np.nan], [-2.0, 0.5]]),
               "categorical": tf.constant([["a", "a"], ["", "b"]])}
    features, label = raw_features.features_of(columns, MAPPING, feature_size=1000)
    ids, values = features["ids"].numpy(), features["values"].numpy()
    np.testing.assert_allclose(values[:, :2], [[np.log1p(3.0), 0.0], [0.0, np.log1p(0.5)]], rtol=1e-6)
    assert (values[:, 2:] == 1).all() and (ids[:, :2] == [0, 1]).all()
    assert ((ids[:, 2:] >= 2) & (ids[:, 2:] < 1000)).all()
    assert ids[0, 2] != ids[0, 3]  # the same value in two columns: two features
    assert label.numpy().tolist() == [[1.0], [0.0]]
    again, _ = raw_features.features_of(columns, MAPPING, feature_size=1000)
    assert (again["ids"].numpy() == ids).all()  # stable


def test_a_values_id_is_the_same_on_every_line():
    """farmhash and the column's key, mixed: what a model trained on one TensorFlow release is served
    on another (these ids, on both lines)."""
    columns = {"label": tf.constant([0.0, 0.0]), "numeric": tf.zeros([2, 2]),
               "categorical": tf.constant([["68fd1e64", ""], ["", "80e26c9b"]])}
    features, _ = raw_features.features_of(columns, MAPPING, feature_size=117581)
    assert features["ids"].numpy()[:, 2:].tolist() == [[108063, 42885], [73577, 77333]]


def test_the_numeric_transform_none_keeps_numbers():
    mapping = resolve_columns(ColumnSpec(None, (1,), (), transform="none"), None, 2, "x")
    features, _ = raw_features.features_of({"label": tf.constant([1.0]), "numeric": tf.constant([[-4.0]]),
                                            "categorical": tf.zeros([1, 0], tf.string)}, mapping, 10)
    assert features["values"].numpy().tolist() == [[-4.0]]


def test_decode_table_reads_missing_values_as_missing():
    columns = raw_features.decode_table(tf.constant(["1,,3,x,", "0,2.5,,,y"]), MAPPING, ",")
    assert columns["label"].numpy().tolist() == [1.0, 0.0]
    numeric = columns["numeric"].numpy()
    assert np.isnan(numeric[0, 0]) and numeric[0, 1] == 3 and numeric[1, 0] == 2.5 and np.isnan(numeric[1, 1])
    assert [column.numpy().tolist() for column in columns["categorical"]] == [[b"x", b""], [b"", b"y"]]


@pytest.mark.parametrize("blocks, header, kept", [
    ([["label,a,b,c,d", "1,2,3,x,y"], ["0,1,1,z,w"]], None, ["1,2,3,x,y", "0,1,1,z,w"]),
    # Pipe mode: each object's header again, among its rows
    ([["label,a,b,c,d", "1,2,3,x,y"], ["label,a,b,c,d", "0,1,1,z,w"]], None, ["1,2,3,x,y", "0,1,1,z,w"]),
    ([["1,2,3,x,y"], ["0,1,1,z,w"]], None, ["1,2,3,x,y", "0,1,1,z,w"]),  # no header
    ([["1,2,3,x,y"], ["0,1,1,z,w"]], True, ["0,1,1,z,w"]),  # header=present: the first line, whatever it holds
    ([[], ["label,a,b,c,d", "1,2,3,x,y"]], None, ["1,2,3,x,y"]),  # an empty first block
    ([['"1",2,3,x,y'], ["0,1,1,z,w"]], None, ['"1",2,3,x,y', "0,1,1,z,w"]),  # a quoted label is a number
])
def test_headers_are_dropped_from_a_stream(blocks, header, kept):
    dataset = tf.data.Dataset.from_generator(lambda: iter(blocks), output_signature=tf.TensorSpec([None], tf.string))
    lines = raw_features.drop_headers(dataset, MAPPING, ",", header)
    assert [line.decode() for block in lines for line in block.numpy()] == kept


@pytest.mark.parametrize("lines, header, count", [
    (["label,a,b,c,d", "1,2,3,x,y"], None, 1),
    (["1,2,3,x,y"], None, 0),
    (["1,2,3,x,y"], True, 1),
    (["label,a,b,c,d"], False, 0),
    ([], None, 0),  # an empty file
])
def test_a_files_header_is_counted(lines, header, count):
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(lines, tf.string))
    assert int(raw_features.header_count(dataset, MAPPING, ",", header, "a.csv")) == count


def test_another_header_than_the_first_files_fails():
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(["label,b,a,c,d", "1,2,3,x,y"]))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        raw_features.header_count(dataset, MAPPING, ",", None, "b.csv", expected="label,a,b,c,d")
    assert str(diagnose.job_error_inside(error.value)) == (
        "b.csv has another header (label,b,a,c,d) than the channel's first file (label,a,b,c,d), by whose header its "
        "columns were found: give every file the same columns")


def test_serving_signatures_score_rows_as_training_parses_them():
    inputs = {"ids": tf.keras.Input((4,), dtype=tf.int64, name="ids"), "values": tf.keras.Input((4,), name="values")}
    embedded = tf.keras.layers.Embedding(1000, 1)(inputs["ids"])[:, :, 0] * inputs["values"]
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(embedded))
    signatures = raw_features.serving_signatures(model, MAPPING, ",", 1000)
    lines = tf.constant(["1,2,,x,y", "0,,0.5,x,"])
    features, _ = raw_features.features_of(raw_features.decode_table(lines, MAPPING, ","), MAPPING, 1000)
    expected = model(features).numpy()
    by_line = signatures["csv"](line=lines)["probability"].numpy()
    without_label = signatures["csv"](line=tf.constant(["2,,x,y", ",0.5,x,"]))["probability"].numpy()
    by_name = signatures["serving_default"](column_1=tf.constant([2.0, np.nan]), column_2=tf.constant([np.nan, 0.5]),
                                            column_3=tf.constant(["x", "x"]), column_4=tf.constant(["y", ""]))
    np.testing.assert_allclose(by_line, expected, atol=1e-6)
    np.testing.assert_allclose(without_label, expected, atol=1e-6)
    np.testing.assert_allclose(by_name["probability"].numpy(), expected, atol=1e-6)
