"""Input pipelines: what one process reads each epoch, in the order of P18, vectorised.

files -> interleave (parallel, deterministic, in blocks of records) -> shard -> windows of
`shuffle_buffer` records -> map(parse a whole window) -> cache -> shuffle each window ->
batch -> prefetch. Records travel in blocks and windows, never one at a time: tf.data pays
its per-element cost (thread hand-off, buffer and batch bookkeeping) once a block, which
keeps the input off a CPU step's critical path (`trainer bench ceiling`). Parsing comes
before the cache, so later epochs parse nothing.

The epoch loop iterates the dataset once per epoch (that is the `repeat`): in File mode the
same dataset object is reused, so its cache fills on the first pass and serves the rest; in
Pipe mode each epoch reads a new FIFO.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from trainer.contract.job import Channel
from trainer.data import ps_worker_input
from trainer.data.fifo import fifo_blocks, wait_for_fifo
from trainer.data.records import FORMATS, TABLE_CONTENT_TYPES, format_of_path, is_gzip_path, is_table_path
from trainer.errors import JobError

log = logging.getLogger(__name__)

CACHE_RAM_FRACTION = 0.25
MAX_PARALLEL_FILE_READS = 8
READ_BLOCK_RECORDS = 128


def list_data_files(path: str) -> list[str]:
    """Data files under `path` (a file or folder): sorted, recursive, hidden ones skipped."""
    if os.path.isfile(path):
        return [path]
    files = []
    for folder, subfolders, names in os.walk(path, followlinks=True):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        files.extend(os.path.join(folder, n) for n in sorted(names) if not n.startswith("."))
    return files


def channel_files(channel: Channel) -> list[str]:
    if not os.path.isdir(channel.path):
        raise JobError(f"channel '{channel.name}': folder {channel.path} does not exist")
    files = list_data_files(channel.path)
    if not files:
        raise JobError(f"channel '{channel.name}': no data files in {channel.path}")
    return files


def resolve_format(requested: str | None, channel: Channel, files: list[str]) -> str:
    """tfrecord or libsvm: the hyperparameter, else the channel's ContentType if it names
    one, else the files' suffixes, else tfrecord. CSV and TSV files are tables, not libsvm,
    unless the hyperparameter or the ContentType says libsvm."""
    if requested:
        return requested
    content_type = channel.content_type.lower()
    for data_format in FORMATS:
        if data_format in content_type:
            return data_format
    tables = [f for f in files if is_table_path(f)]
    if tables or content_type.startswith(TABLE_CONTENT_TYPES):
        what = f"{tables[0]} is" if tables else f"its ContentType {channel.content_type} names"
        name = os.path.basename(tables[0]) if tables else "day_0.csv"
        raise JobError(f"channel '{channel.name}': {what} a CSV or TSV table, which the built-in model does "
                       "not read: it reads TFRecord (tf.train.Example with ids, values and label) or libsvm text "
                       "(label id:value ..., one pair per field). Raw Criteo columns (label, I1..I13, C1..C26) "
                       f"convert with: trainer convert {name} --output data/ (docs/development.md, Data); "
                       "a file that is libsvm text inside: set data_format=libsvm")
    formats = {format_of_path(f) for f in files}
    if len(formats) > 1:
        raise JobError(f"channel '{channel.name}': mixes TFRecord and libsvm files; "
                       "keep one format per channel or set data_format")
    return formats.pop() if formats else "tfrecord"


@dataclass(frozen=True)
class InputSpec:
    """What one process reads: its channels (one or more, of one input mode) and its shard."""

    channels: tuple[Channel, ...]
    data_format: str
    files: tuple[str, ...] = ()  # File mode
    shard_count: int = 1
    shard_index: int = 0
    # Every parameter-server worker runs this spec as its own, on its own host: its folders
    # are listed there (ShardedByS3Key gives each host other files than the coordinator's),
    # its FIFOs read there, and its shard index is that worker's (trainer.data.ps_worker_input).
    on_ps_worker: bool = False
    # Read by a heterogeneous cluster's data hosts (trainer.data.service). The files listed
    # here (recursively) when this host has the channels; else (they were sent to the data
    # group only) the data hosts list the folders' top-level files themselves.
    on_data_hosts: bool = False

    @staticmethod
    def for_channels(channels, requested_format: str | None, shard: tuple[int, int] = (1, 0),
                     on_data_hosts: bool = False) -> "InputSpec":
        channels = tuple(channels)
        if len({c.input_mode for c in channels}) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} mix input modes; use one")
        files, formats = [], set()
        for channel in channels:
            here = not channel.is_pipe and (not on_data_hosts or os.path.isdir(channel.path))
            channel_files_ = channel_files(channel) if here else []
            files += channel_files_
            formats.add(resolve_format(requested_format, channel, channel_files_))
        if len(formats) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} hold different record formats")
        if len({c.is_gzip for c in channels}) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} differ in CompressionType; give them one")
        return InputSpec(channels, formats.pop(), tuple(files), *shard, on_data_hosts=on_data_hosts)

    @property
    def name(self) -> str:
        return ", ".join(c.name for c in self.channels)

    @property
    def is_pipe(self) -> bool:
        return self.channels[0].is_pipe

    @property
    def is_gzip(self) -> bool:
        """Its channels' CompressionType is Gzip (File mode)."""
        return any(c.is_gzip for c in self.channels)

    def compression_of(self, path: str) -> str:
        """TensorFlow's compression_type for one of its files: GZIP by the channel's
        CompressionType or the file's .gz suffix, else none."""
        return "GZIP" if self.is_gzip or is_gzip_path(path) else ""

    def total_bytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.files)


def _file_blocks(spec: InputSpec):
    import tensorflow as tf

    # Files are read in parallel (P19: it pays on network storage), in blocks of records:
    # the parallel interleave hands its elements between threads one at a time.
    # compression_of, in the graph: a parameter-server worker lists its files there.
    # TensorFlow's readers take the compression as a tensor, so each file gets its own.
    channel_gzip = "GZIP" if spec.is_gzip else ""

    def read(path):
        compression = tf.where(tf.strings.regex_full_match(path, r"(?i).*\.gz"), "GZIP", channel_gzip)
        if spec.data_format == "tfrecord":
            records_ = tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=1 << 20)
        else:
            lines = tf.data.TextLineDataset(path, compression_type=compression)
            records_ = lines.filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
        return records_.batch(READ_BLOCK_RECORDS)

    if spec.on_ps_worker or (spec.on_data_hosts and not spec.files):  # the folders' top-level files, sorted, where read
        files = tf.data.Dataset.list_files([f"{c.path}/*" for c in spec.channels], shuffle=False)
        cycle_length = MAX_PARALLEL_FILE_READS
    else:
        files = tf.data.Dataset.from_tensor_slices(list(spec.files))
        cycle_length = min(len(spec.files), MAX_PARALLEL_FILE_READS)
    # Deterministic so that every process sees the same order and the record-level shard
    # below gives each record to exactly one process.
    return files.interleave(read, cycle_length=cycle_length, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)


def pipe_reader(requested: str = "auto", channels=()) -> str:
    """pipemodedataset (AWS's, where sagemaker-tensorflow is installed) or project; project
    for RecordIO-wrapped channels, whose objects AWS's reader yields whole where the
    project's reads the records inside them."""
    if any(channel.is_recordio_wrapped for channel in channels):
        return "project"
    if requested != "auto":
        return requested
    try:
        import sagemaker_tensorflow  # (AWS's on Python 3.9/3.10 with TF 2.14: the 2.14 image has it)
    except ImportError:
        return "project"
    # On the 2.21 line it is the project's own reader behind AWS's name: read the FIFOs directly.
    return "project" if getattr(sagemaker_tensorflow, "PROVIDED_BY", "") == "trainer" else "pipemodedataset"


_PIPE_STATE_DIR = None


def _pipe_mode_dataset(channel: Channel, data_format: str):
    """AWS's reader. It counts epochs itself (one FIFO per iterator, from 0 in a fresh state
    folder), as the project's passes do; its state lives in a folder of this process."""
    import tempfile

    from sagemaker_tensorflow import PipeModeDataset

    global _PIPE_STATE_DIR
    if _PIPE_STATE_DIR is None:
        _PIPE_STATE_DIR = tempfile.mkdtemp(prefix="pipe-state-")
    data_dir = os.path.dirname(channel.path)
    return PipeModeDataset(channel.name, record_format="TFRecord" if data_format == "tfrecord" else "TextLine",
                           state_dir=_PIPE_STATE_DIR, pipe_dir=data_dir,
                           config_dir=os.path.join(os.path.dirname(data_dir), "config"))


def _pipe_blocks(spec: InputSpec, pipe_epoch: int, pipe_wait_sec: float, reader: str):
    dataset = None
    for channel in spec.channels:
        if spec.on_ps_worker:
            stream = ps_worker_input.host_fifo_blocks(channel.name, pipe_epoch, spec.data_format)
        else:
            path = channel.fifo_path(pipe_epoch)
            wait_for_fifo(path, pipe_wait_sec)  # AWS's reader would wait for ever
            if reader == "pipemodedataset":
                stream = _pipe_mode_dataset(channel, spec.data_format).batch(READ_BLOCK_RECORDS)
            else:
                stream = fifo_blocks(path, spec.data_format, pipe_wait_sec, recordio=channel.is_recordio_wrapped)
        dataset = stream if dataset is None else dataset.concatenate(stream)
    return dataset


def shard_blocks(blocks, shard_count: int, shard_index: int):
    """Record k of the stream to process k % shard_count, as Dataset.shard does record by
    record, but a block at a time (tf.data's shard works on whole elements)."""
    import tensorflow as tf

    def keep(offset, block):
        size = tf.shape(block, out_type=tf.int64)[0]
        position = offset + tf.range(size, dtype=tf.int64)
        return offset + size, tf.boolean_mask(block, position % shard_count == shard_index)

    return blocks.scan(tf.constant(0, tf.int64), keep).filter(lambda block: tf.size(block) > 0)


def record_blocks(spec: InputSpec, pipe_epoch: int, pipe_wait_sec: float, reader: str = "project"):
    """The serialized records this process reads in one epoch (sharded), in blocks: a dataset
    of 1-D string tensors of up to READ_BLOCK_RECORDS records each."""
    if spec.is_pipe:
        blocks = _pipe_blocks(spec, pipe_epoch, pipe_wait_sec, reader)
    else:
        blocks = _file_blocks(spec)
    if spec.shard_count > 1:
        index = ps_worker_input.worker_index() if spec.on_ps_worker else spec.shard_index
        blocks = shard_blocks(blocks, spec.shard_count, index)
    return blocks


def records(spec: InputSpec, pipe_epoch: int, pipe_wait_sec: float, reader: str = "project"):
    """The same records one at a time."""
    return record_blocks(spec, pipe_epoch, pipe_wait_sec, reader).unbatch()


def should_cache(setting: str, spec: InputSpec, processes_per_host: int = 1) -> bool:
    if setting in ("true", "false"):
        return setting == "true" and not spec.is_pipe
    if spec.is_pipe:
        return False
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return spec.total_bytes() / spec.shard_count * processes_per_host < CACHE_RAM_FRACTION * ram


class EpochInput:
    """The batched, parsed dataset of each epoch for one channel.

    An epoch's order depends on the seed and the epoch only, not on how many passes this
    process made before: a job resumed mid-epoch (after SIGTERM) sees the same batches the
    stopped one would have, and skips the ones it already trained on.
    """

    def __init__(self, spec: InputSpec, parse_fn, batch_size: int, shuffle_buffer: int = 0,
                 seed: int | None = None, cache: bool = False, pipe_wait_sec: float = 600.0,
                 reader: str = "project", service=None):
        self.spec = spec
        self.parse_fn = parse_fn
        self.batch_size = batch_size
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.cache = cache
        self.pipe_wait_sec = pipe_wait_sec
        self.reader = reader
        # A heterogeneous cluster's data hosts (trainer.plan.types.DataService): they read,
        # parse and batch; this process reads the batches (trainer.data.service). None: here.
        self.service = service
        self._file_windows = None

    def dataset(self, pass_index: int, epoch: int | None = None, skip_batches: int = 0):
        """The dataset of one pass: `pass_index` counts this run's passes over the channel
        (Pipe mode's FIFO number), `epoch` the job's (default: the pass), `skip_batches` the
        batches of it already trained on."""
        epoch = pass_index if epoch is None else epoch
        seed = None if self.seed is None else self.seed + epoch
        if self.service is not None:
            # The same pipeline, run on the data workers, each parsing its share of the blocks;
            # no cache (each pass is a job of its own there).
            from trainer.data import service

            blocks = service.split_among_workers(record_blocks(self.spec, pass_index, self.pipe_wait_sec))
            batches = service.read_through(self._batches(self._windows(blocks, cache=False), seed),
                                           self.service, self.batch_size)
            return self._skip_and_prefetch(batches, skip_batches)
        # Pipe mode reads a new FIFO every pass; a parameter-server worker's pass is traced
        # anew every epoch (each trace is a graph of its own: nothing of it carries over).
        if self.spec.is_pipe or self.spec.on_ps_worker:
            windows = self._windows(record_blocks(self.spec, pass_index, self.pipe_wait_sec, self.reader))
        else:
            if self._file_windows is None:  # one dataset of windows, so one cache, for every pass
                self._file_windows = self._windows(record_blocks(self.spec, 0, self.pipe_wait_sec))
            windows = self._file_windows
        return self._skip_and_prefetch(self._batches(windows, seed), skip_batches)

    def later_epochs(self, batches: int):
        """What the step runs on in a job's epochs after the first, on a sample, repeated: the
        first whole windows of this input that `batches` batches hold (those batches' records,
        in one window, where they hold less than one; fewer where its shard is shorter), parsed
        into a cache on the first pass, then every pass shuffled and batched as an epoch's
        windows are, and prefetched (trainer.cpu's measurements of the step: the same stages'
        cost, on records that come again only a pass later, not a few batches whose embedding
        rows stay in the CPU's caches). A pass holds at most `batches` batches: that many
        steps fill the cache."""
        window = max(self.shuffle_buffer, self.batch_size)
        size = batches * self.batch_size
        size -= size % window if size >= window else 0
        first = record_blocks(self.spec, 0, self.pipe_wait_sec, self.reader).rebatch(size).take(1)
        sample = self._windows(first, cache=False).cache()
        return self._skip_and_prefetch(self._batches(sample.repeat(), self.seed), 0)

    def _windows(self, blocks, cache: bool | None = None):
        import tensorflow as tf

        window = max(self.shuffle_buffer, self.batch_size)
        windows = blocks.rebatch(window).map(self.parse_fn, num_parallel_calls=tf.data.AUTOTUNE)
        return windows.cache() if (self.cache if cache is None else cache) else windows

    def _batches(self, windows, seed):
        if self.shuffle_buffer:
            windows = shuffle_windows(windows, seed)
        return windows.rebatch(self.batch_size)

    @staticmethod
    def _skip_and_prefetch(batches, skip_batches):
        import tensorflow as tf

        if not isinstance(skip_batches, int) or skip_batches:  # a tensor: a PS worker's own count
            batches = batches.skip(skip_batches)
        return without_autotune_model(batches.prefetch(tf.data.AUTOTUNE))


def without_autotune_model(dataset):
    """`dataset` without tf.data's autotuning model.

    The model is a thread per iterator that re-plans every stage's parallelism on a period
    that doubles while the iterator lives; an iterator's end waits for that thread to wake.
    On a host of one CPU that wait came at most epochs' ends (TF 2.14 and 2.21 alike): 9-10 s
    of a 12 s epoch for one host, up to 53 s for a multi-worker mirrored worker, 20 s in a
    parameter-server worker's last round (which the job's samples/s then counts). Without the
    model each AUTOTUNE stage keeps tf.data's starting parallelism (a call per CPU tf.data may
    use, capped by TensorFlow) and prefetch grows its buffer whenever the step waits: enough
    for stages that parse a whole window a call."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def shuffle_windows(windows, seed):
    """Each parsed window in a random order that `seed` (the epoch's) decides.

    Dataset.shuffle does this record by record through a buffer (its per-element cost is
    what this pipeline avoids); here one gather per window. A record stays in its window,
    as in a shuffle buffer of that size it stays near its place in the stream.
    """
    import tensorflow as tf

    def permute(window, window_seed):
        count = tf.shape(tf.nest.flatten(window)[0])[0]
        order = tf.random.experimental.stateless_shuffle(tf.range(count), seed=window_seed)
        return tf.nest.map_structure(lambda tensor: tf.gather(tensor, order), window)

    # The first pass's seeds follow from `seed` alone; a repeat draws new ones.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip((windows, seeds)).map(permute, num_parallel_calls=tf.data.AUTOTUNE)
