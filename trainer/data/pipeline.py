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

import contextlib
import logging
import os
from dataclasses import dataclass

from trainer.contract.job import Channel
from trainer.data import formats, parquet, ps_worker_input
from trainer.data.columns import ColumnMapping, ColumnSpec, nominal, resolve_columns
from trainer.data.fifo import fifo_blocks, wait_for_fifo
from trainer.errors import JobError

log = logging.getLogger(__name__)

CACHE_RAM_FRACTION = 0.25
MAX_PARALLEL_FILE_READS = 8
READ_BLOCK_RECORDS = 128
READ_BATCH_RECORDS = 4096
# Bytes of parsed input (ids, values, label) a byte of each format becomes, about (the cache's
# estimate: the built-in model's rows, a Criteo-like log); a gzip-compressed file several more.
PARSED_BYTES_PER_BYTE = {"tfrecord": 1.2, "libsvm": 1.5, "csv": 3.0, "tsv": 3.0, "parquet": 6.0}
GZIP_EXPANSION = 4.0


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


@contextlib.contextmanager
def files_named_in(channel: Channel):
    """A file's error ("file ...: ...") as read while placing a channel: said with the channel too."""
    try:
        yield
    except JobError as err:
        if str(err).startswith("file "):
            raise JobError(f"channel '{channel.name}': {err}") from None
        raise


def columns_of(resolved: formats.Resolved, channel: Channel, files: list[str],
               spec: ColumnSpec) -> tuple[ColumnMapping | None, str]:
    """A raw channel's column mapping (trainer.data.columns) and the header line every one of
    its files must have ("" where it is not read by name): from its first file's header or
    schema; in Pipe mode, where nothing can be read before the stream, from the spec alone
    (a Parquet object's columns are then found in each object's own schema)."""
    data_format = resolved.data_format
    if data_format not in formats.COLUMN_FORMATS:
        return None, ""
    if not files:
        if data_format == "parquet":
            return nominal(spec), ""
        return resolve_columns(spec, None, None, f"channel '{channel.name}' (Pipe mode: a header cannot be read before the "
                                         "stream arrives)"), ""
    first = files[0]
    if data_format == "parquet":
        names = parquet.schema_names(first)
        return resolve_columns(spec, names, len(names), f"channel '{channel.name}': file {first}"), ""
    label_at = spec.label[0] if spec.label and isinstance(spec.label[0], int) else 0
    header = formats.table_header(first, data_format, resolved.content_type.header, label_at)
    if header.width == 1:
        raise JobError(f"channel '{channel.name}': file {first} read as {resolved.name} ({resolved.why}) has one "
                       f"column: is it {'TSV' if data_format == 'csv' else 'CSV'}? Set the channel's ContentType or "
                       "data_format, or name it by its format")
    mapping = resolve_columns(spec, header.names, header.width, f"channel '{channel.name}': file {first}")
    return mapping, header.line if mapping.by_name else ""


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
    format_why: str = ""  # how the format was found (the log's, and errors')
    # CSV, TSV and Parquet: the columns as the hyperparameters give them, and as placed on the
    # channel's first file (trainer.data.columns); a table's header, when read by name.
    column_spec: ColumnSpec | None = None
    columns: ColumnMapping | None = None
    header: bool | None = None  # the ContentType's header=present|absent; None: look
    header_line: str = ""
    skip_bad_records: bool = False  # Parquet: rows with a missing label or a bad number marked, not fatal
    # Parquet: the model's feature_size, into whose ids each distinct categorical value is hashed
    # as it is read (None: the values stay strings, as trainer.kit.rows gives them).
    feature_size: int | None = None

    @staticmethod
    def for_channels(channels, requested_format: str | None, shard: tuple[int, int] = (1, 0),
                     on_data_hosts: bool = False, column_spec: ColumnSpec | None = None,
                     skip_bad_records: bool = False, feature_size: int | None = None) -> "InputSpec":
        channels = tuple(channels)
        column_spec = column_spec or ColumnSpec()
        if len({c.input_mode for c in channels}) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} mix input modes; use one")
        files, found = [], {}
        for channel in channels:
            here = not channel.is_pipe and (not on_data_hosts or os.path.isdir(channel.path))
            channel_files_ = channel_files(channel) if here else []
            files += channel_files_
            with files_named_in(channel):
                resolved = formats.resolve_format(requested_format, channel, channel_files_)
            found.setdefault(resolved.data_format, (channel, resolved, channel_files_))
        if len(found) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} hold different record formats: "
                           + ", ".join(f"'{c.name}' {r.name} ({r.why})" for c, r, _ in found.values()))
        if len({c.is_gzip for c in channels}) > 1:
            raise JobError(f"channels {', '.join(c.name for c in channels)} differ in CompressionType; give them one")
        (channel, resolved, first_files), = found.values()
        with files_named_in(channel):
            mapping, header_line = columns_of(resolved, channel, first_files, column_spec)
        if mapping is not None and mapping.by_name and resolved.data_format == "parquet" and first_files:
            column_spec = mapping.by_names()  # every file is read by the first one's column names
        return InputSpec(channels, resolved.data_format, tuple(files), *shard, on_data_hosts=on_data_hosts,
                         format_why=resolved.why, column_spec=column_spec if mapping else None, columns=mapping,
                         header=resolved.content_type.header, header_line=header_line,
                         skip_bad_records=skip_bad_records, feature_size=feature_size)

    @staticmethod
    def for_process(job, process, on_data_hosts: bool = False) -> "InputSpec":
        """What a process of the plan reads for training: its channels, their format and
        columns (as the job's hyperparameters give them), its shard."""
        hp = job.hyperparameters
        return InputSpec.for_channels([job.channels[c] for c in process.channels], hp.data_format, process.shard,
                                      on_data_hosts=on_data_hosts, column_spec=ColumnSpec.from_hyperparameters(hp),
                                      skip_bad_records=hp.skip_bad_records, feature_size=hp.feature_size)

    def describe(self, feature_size: int) -> dict:
        """What it trains on, for the plan and the log: the format, how it was found, and
        where the columns are, per column (CSV, TSV, Parquet)."""
        described = {"channels": [c.name for c in self.channels], "input_mode": self.channels[0].input_mode,
                     "format": self.data_format, "found_by": self.format_why}
        if self.columns is not None:
            described["columns"] = self.columns.describe(feature_size)
            described["field_size"] = self.columns.field_size
            if self.is_parquet and self.is_pipe:
                described["columns_found"] = "in each object's own schema, by these names (or positions)"
        return described

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

    @property
    def is_parquet(self) -> bool:
        return self.data_format == "parquet"

    @property
    def delimiter(self) -> str:
        """A table's delimiter (a Parquet row as one line, in the exported model's `csv` signature: a comma)."""
        return formats.DELIMITERS.get(self.data_format, ",")

    def compression_of(self, path: str) -> str:
        """TensorFlow's compression_type for one of its files: GZIP by the channel's
        CompressionType or the file's .gz suffix, else none."""
        return "GZIP" if self.is_gzip or formats.is_gzip_path(path) else ""

    def parsed_bytes(self) -> float:
        """About how many bytes its records take parsed (the cache's size)."""
        factor = PARSED_BYTES_PER_BYTE[self.data_format]
        return sum(os.path.getsize(f) * factor * (GZIP_EXPANSION if self.compression_of(f) else 1.0)
                   for f in self.files)

    def parser(self, field_size: int, feature_size: int, bad_records=None):
        """The built-in parse of a window of this input's records: (features, label)."""
        from trainer.data import raw_features, records

        if self.is_parquet:
            return raw_features.columns_parser(self.columns, feature_size, bad_records)
        if self.columns is not None:
            return raw_features.table_parser(self.columns, self.delimiter, feature_size, bad_records)
        return records.batch_parser(self.data_format, field_size, bad_records)

    def describe_columns(self, feature_size: int) -> str:
        if self.columns is None:
            return ""
        pipe = " (Pipe mode: each object's own schema)" if self.is_parquet and self.is_pipe else ""
        return f"columns{pipe}: {self.columns.summary(feature_size)}"


def _parquet_blocks(spec: InputSpec, source, kind: str, wait_sec: float | None = None):
    """A Parquet file's or stream's Columns blocks of READ_BLOCK_RECORDS rows, as the other
    formats' (so that files interleave alike, and every format shards alike)."""
    from trainer.data.raw_features import hash_into

    options = parquet.Options(wait_sec=wait_sec, recordio=spec.channels[0].is_recordio_wrapped,
                              skip_bad=spec.skip_bad_records)
    hashed = hash_into(spec.columns, spec.feature_size) if spec.feature_size else None
    return parquet.blocks(source, kind, spec.column_spec, options, hashed).flat_map(split_into_blocks)


def split_into_blocks(chunk):
    """A chunk of rows (a nest of tensors, rows first) as a dataset of blocks of
    READ_BLOCK_RECORDS rows, the last shorter: its tensors reshaped and sliced, where
    Dataset.rebatch would copy a row's every value on its own (a Parquet row has dozens)."""
    import tensorflow as tf

    rows = tf.shape(tf.nest.flatten(chunk)[0])[0]
    whole = rows // READ_BLOCK_RECORDS * READ_BLOCK_RECORDS
    blocks = tf.nest.map_structure(
        lambda tensor: tf.reshape(tensor[:whole], tf.concat([[-1, READ_BLOCK_RECORDS], tf.shape(tensor)[1:]], 0)),
        chunk)
    rest = tf.nest.map_structure(lambda tensor: tf.expand_dims(tensor[whole:], 0), chunk)
    return tf.data.Dataset.from_tensor_slices(blocks).concatenate(
        tf.data.Dataset.from_tensor_slices(rest).filter(lambda block: tf.shape(tf.nest.flatten(block)[0])[0] > 0))


def _table_without_headers(spec: InputSpec, blocks):
    """A CSV or TSV stream's blocks of lines without its header lines (Pipe mode: each object's)."""
    from trainer.data.raw_features import drop_headers

    return drop_headers(blocks, spec.columns, spec.delimiter, spec.header)


def _without_header(spec: InputSpec, lines, path):
    """A CSV or TSV file's lines after its header, when it has one."""
    from trainer.data.raw_features import header_count

    return lines.skip(header_count(lines, spec.columns, spec.delimiter, spec.header, path, spec.header_line))


def _file_blocks(spec: InputSpec):
    import tensorflow as tf

    # Files are read in parallel (P19: it pays on network storage), in blocks of records:
    # the parallel interleave hands its elements between threads one at a time.
    # compression_of, in the graph: a parameter-server worker lists its files there.
    # TensorFlow's readers take the compression as a tensor, so each file gets its own.
    channel_gzip = "GZIP" if spec.is_gzip else ""

    def read(path):
        if spec.is_parquet:
            return _parquet_blocks(spec, path, "file")
        compression = tf.where(tf.strings.regex_full_match(path, r"(?i).*\.gz"), "GZIP", channel_gzip)
        # Read in large batches, then cut into blocks: a batch's cost is paid per batch, and every
        # format's blocks hold the same records (READ_BLOCK_RECORDS), so files interleave alike.
        if spec.data_format == "tfrecord":
            return tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=1 << 20).batch(
                READ_BATCH_RECORDS).rebatch(READ_BLOCK_RECORDS)
        lines = tf.data.TextLineDataset(path, compression_type=compression)
        if spec.columns is not None:  # a table's header: left out before the blocks, which then hold rows alike
            lines = _without_header(spec, lines, path)
        # Empty lines dropped a batch at a time: a filter's per-line call costs more than reading.
        return lines.batch(READ_BATCH_RECORDS).map(
            lambda batch: tf.boolean_mask(batch, tf.strings.length(tf.strings.strip(batch)) > 0)).rebatch(
            READ_BLOCK_RECORDS)

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
        if spec.is_parquet:
            source, kind = ((f"{channel.name}:{pipe_epoch}", "channel") if spec.on_ps_worker
                            else (channel.fifo_path(pipe_epoch), "stream"))
            stream = _parquet_blocks(spec, source, kind, pipe_wait_sec)
        elif spec.on_ps_worker:
            stream = ps_worker_input.host_fifo_blocks(channel.name, pipe_epoch, spec.data_format)
        else:
            path = channel.fifo_path(pipe_epoch)
            wait_for_fifo(path, pipe_wait_sec)  # AWS's reader would wait for ever
            if reader == "pipemodedataset":
                stream = _pipe_mode_dataset(channel, spec.data_format).batch(READ_BLOCK_RECORDS)
            else:
                stream = fifo_blocks(path, spec.data_format, pipe_wait_sec, recordio=channel.is_recordio_wrapped)
        if spec.columns is not None and not spec.is_parquet:
            stream = _table_without_headers(spec, stream)
        dataset = stream if dataset is None else dataset.concatenate(stream)
    return dataset


def shard_blocks(blocks, shard_count: int, shard_index: int):
    """Record k of the stream to process k % shard_count, as Dataset.shard does record by
    record, but a block at a time (tf.data's shard works on whole elements)."""
    import tensorflow as tf

    def rows(block):  # a block of records, or of Parquet's Columns
        return tf.shape(tf.nest.flatten(block)[0], out_type=tf.int64)[0]

    def keep(offset, block):
        size = rows(block)
        mine = (offset + tf.range(size, dtype=tf.int64)) % shard_count == shard_index
        return offset + size, tf.nest.map_structure(lambda tensor: tf.boolean_mask(tensor, mine), block)

    return blocks.scan(tf.constant(0, tf.int64), keep).filter(lambda block: rows(block) > 0)


def record_blocks(spec: InputSpec, pipe_epoch: int, pipe_wait_sec: float, reader: str = "project"):
    """The records this process reads in one epoch (sharded), in blocks: a dataset of 1-D
    string tensors of up to READ_BLOCK_RECORDS serialized records or lines each, or (Parquet)
    of Columns blocks (trainer.data.raw_features), a chunk of rows each."""
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
    return spec.parsed_bytes() / spec.shard_count * processes_per_host < CACHE_RAM_FRACTION * ram


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
