"""The input pipeline: format resolution, stage order, sharding reads each record once."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.contract.job import Channel
from trainer.data.pipeline import EpochInput, InputSpec, records, should_cache
from trainer.data import records as layout
from trainer.errors import JobError


def channel(path, mode="File", content_type=""):
    return Channel("training", mode, "FullyReplicated", content_type, str(path))


def make_files(folder, count, per_file):
    folder.mkdir(parents=True, exist_ok=True)
    serial = 0
    for index in range(count):
        with tf.io.TFRecordWriter(str(folder / f"part-{index}.tfrecord")) as writer:
            for _ in range(per_file):
                writer.write(layout.encode_example(serial % 2, [serial, 1], [1.0, 0.5]))
                serial += 1
    return serial


def test_empty_or_missing_channel_folder(tmp_path):
    with pytest.raises(JobError, match="channel 'training': folder .* does not exist"):
        InputSpec.for_channels([channel(tmp_path / "none")], None)
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    with pytest.raises(JobError, match="channel 'training': no data files in"):
        InputSpec.for_channels([channel(tmp_path / "empty")], None)


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_shards_partition_the_records(tmp_path, shards):
    total = make_files(tmp_path / "data", 3, 50)
    seen = []
    for index in range(shards):
        spec = InputSpec.for_channels([channel(tmp_path / "data")], None, (shards, index))
        parse = layout.batch_parser("tfrecord", 2)
        for features, _ in records(spec, 0, 1).batch(64).map(parse):
            seen += features["ids"].numpy()[:, 0].tolist()
    assert sorted(seen) == list(range(total))


@pytest.mark.parametrize("block_sizes, shards", [
    ([128, 128, 37], 2),
    ([5, 3, 7, 1], 3),
    ([1, 1, 1], 4),  # fewer records than shards: one process gets none
    ([200], 1),
])
def test_block_shards_match_record_shards(block_sizes, shards):
    from trainer.data.pipeline import shard_blocks

    stream = tf.range(sum(block_sizes), dtype=tf.int64)
    blocks = tf.data.Dataset.from_tensor_slices(tf.RaggedTensor.from_row_lengths(stream, block_sizes))
    blocks = blocks.map(lambda block: block)  # ragged rows -> 1-D tensors
    records_ = tf.data.Dataset.from_tensor_slices(stream)
    for index in range(shards):
        got = [int(v) for v in shard_blocks(blocks, shards, index).unbatch()]
        assert got == [int(v) for v in records_.shard(shards, index)]


def test_epoch_input_batches_parsed_shuffled_and_cached(tmp_path):
    total = make_files(tmp_path / "data", 2, 100)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)
    epoch_input = EpochInput(spec, layout.batch_parser("tfrecord", 2), batch_size=32, shuffle_buffer=1000,
                             seed=1, cache=True)
    orders = []
    for epoch in range(2):
        ids = np.concatenate([f["ids"].numpy()[:, 0] for f, _ in epoch_input.dataset(epoch)])
        assert sorted(ids.tolist()) == list(range(total))
        orders.append(ids.tolist())
    assert orders[0] != orders[1]  # reshuffled every epoch
    # The files are read once: later epochs come from the cache, even with the files gone.
    for path in (tmp_path / "data").iterdir():
        path.unlink()
    again = np.concatenate([f["ids"].numpy()[:, 0] for f, _ in epoch_input.dataset(1)])
    assert again.tolist() == orders[1]


def test_every_pass_runs_without_the_autotune_model(tmp_path):
    # Its thread held each epoch's end for seconds on one-CPU hosts (without_autotune_model).
    make_files(tmp_path / "data", 2, 100)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)
    epoch_input = EpochInput(spec, layout.batch_parser("tfrecord", 2), batch_size=32, shuffle_buffer=64, seed=1,
                             cache=True)
    passes = [epoch_input.dataset(0), epoch_input.dataset(1), epoch_input.dataset(1, 1, skip_batches=2)]
    assert [dataset.options().autotune.enabled for dataset in passes] == [False, False, False]
    assert sum(1 for _ in passes[2]) == 200 // 32 + 1 - 2  # and every batch still comes


def test_an_epoch_order_depends_on_the_epoch_only_and_resumes_by_skipping(tmp_path):
    make_files(tmp_path / "data", 2, 100)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)

    def epoch_ids(epoch_input, epoch, skip=0):
        return [int(f["ids"][i, 0]) for f, _ in epoch_input.dataset(0, epoch, skip) for i in range(f["ids"].shape[0])]

    def fresh():  # a new process's input, as a resumed job builds it
        return EpochInput(spec, layout.batch_parser("tfrecord", 2), batch_size=32, shuffle_buffer=64, seed=5)

    seen = fresh()
    for epoch in range(3):
        full = epoch_ids(seen, epoch)
    assert epoch_ids(fresh(), 2) == full
    assert epoch_ids(fresh(), 2, skip=3) == full[3 * 32:]


@pytest.mark.parametrize("shuffle_buffer, batch_size, total", [
    (0, 32, 200),      # no shuffle: the stream's order, batch by batch
    (64, 32, 200),     # several windows; batches cross window edges
    (1000, 32, 200),   # one window holds everything
    (10, 32, 200),     # window smaller than a batch
])
def test_every_record_once_per_epoch_in_full_batches(tmp_path, shuffle_buffer, batch_size, total):
    make_files(tmp_path / "data", 2, total // 2)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)
    epoch_input = EpochInput(spec, layout.batch_parser("tfrecord", 2), batch_size, shuffle_buffer, seed=3)
    sizes, ids = [], []
    for features, labels in epoch_input.dataset(0):
        sizes.append(int(labels.shape[0]))
        ids += features["ids"].numpy()[:, 0].tolist()
    assert sizes == [batch_size] * (total // batch_size) + [total % batch_size]
    assert sorted(ids) == list(range(total))
    assert (ids == list(range(total))) == (shuffle_buffer == 0)


@pytest.mark.parametrize("shuffle_buffer, batches, sample_records", [
    (64, 9, 128),    # the whole windows 9 batches of 16 hold: two of 64 records (8 batches)
    (64, 3, 48),     # fewer batches than a window: their records, in one window
    (64, 100, 200),  # more than the shard: all of it, every pass
    (0, 5, 80),      # no shuffle: windows of a batch, in the stream's order every pass
])
def test_later_epochs_sample_the_first_windows_cached_and_reshuffle_every_pass(tmp_path, shuffle_buffer, batches,
                                                                               sample_records):
    # What the probes time the step on (trainer.measure.rates.later_epochs_rate).
    make_files(tmp_path / "data", 2, 100)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)
    epoch_input = EpochInput(spec, layout.batch_parser("tfrecord", 2), 16, shuffle_buffer, seed=2)
    stream = [int(i) for f, _ in EpochInput(spec, layout.batch_parser("tfrecord", 2), 16).dataset(0)
              for i in f["ids"].numpy()[:, 0]]
    iterator = iter(epoch_input.later_epochs(batches))

    def next_pass():
        return [int(i) for _ in range(-(-sample_records // 16)) for i in next(iterator)[0]["ids"].numpy()[:, 0]]

    passes = [next_pass()]
    for path in (tmp_path / "data").iterdir():  # the passes after the first read the cache
        path.unlink()
    passes += [next_pass(), next_pass()]
    if sample_records % 16 == 0:
        assert sample_records // 16 <= batches  # so `batches` untimed steps fill the cache
        assert [sorted(p) for p in passes] == [sorted(stream[:sample_records])] * 3  # the first windows' records
    else:  # the whole shard, in batches that run on into the next pass
        assert sorted(sum(passes, [])[:sample_records]) == sorted(stream)
    if shuffle_buffer:
        assert passes[0] != passes[1] != passes[2]  # reshuffled every pass
    else:
        assert passes == [stream[:sample_records]] * 3


def test_cache_decision(tmp_path):
    make_files(tmp_path / "data", 1, 10)
    spec = InputSpec.for_channels([channel(tmp_path / "data")], None)
    pipe = InputSpec((channel(tmp_path / "x", mode="Pipe"),), "tfrecord")
    assert should_cache("auto", spec) and should_cache("true", spec) and not should_cache("false", spec)
    assert not should_cache("auto", pipe) and not should_cache("true", pipe)


def test_pipe_reader_choice():
    from trainer.data.pipeline import pipe_reader

    try:
        import sagemaker_tensorflow
        # AWS's where it is AWS's (the 2.14 image); the 2.21 line's is the project's reader anyway.
        expected = "project" if getattr(sagemaker_tensorflow, "PROVIDED_BY", "") == "trainer" else "pipemodedataset"
    except ImportError:
        expected = "project"
    assert pipe_reader("auto") == expected
    assert pipe_reader("project") == "project" and pipe_reader("pipemodedataset") == "pipemodedataset"


def test_one_process_reads_several_channels(tmp_path):
    total_a = make_files(tmp_path / "a", 1, 30)
    make_files(tmp_path / "b", 1, 20)
    channels = [channel(tmp_path / "a"), Channel("training-2", "File", "FullyReplicated", "", str(tmp_path / "b"))]
    spec = InputSpec.for_channels(channels, None)
    assert spec.name == "training, training-2" and len(spec.files) == 2
    assert sum(1 for _ in records(spec, 0, 1)) == total_a + 20


def test_a_data_groups_input_lists_its_files_where_it_can(tmp_path):
    """With a data group the training host lists the channel as without one (recursively)
    when it has it; a channel sent to the data group only is listed by the data hosts."""
    (tmp_path / "training" / "part").mkdir(parents=True)
    (tmp_path / "training" / "part" / "a.tfrecords").write_bytes(b"")
    here = InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", str(tmp_path / "training"))],
                                  None, (2, 1), on_data_hosts=True)
    assert here.files == (str(tmp_path / "training" / "part" / "a.tfrecords"),) and here.on_data_hosts
    assert (here.shard_count, here.shard_index) == (2, 1)
    elsewhere = InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", str(tmp_path / "absent"))],
                                       None, on_data_hosts=True)
    assert elsewhere.files == () and elsewhere.on_data_hosts and elsewhere.data_format == "tfrecord"
