"""The model channel: a previous job's model, as SageMaker hands it to a new job (SDK 2.x
`model_uri=` with `model_channel_name`, SDK 3.x an InputData of that name): its
`model.tar.gz`, or the SavedModel folder itself. Read without TensorFlow: where the
SavedModel is, and the record the trainer exports beside it (the job, epochs and model
shape that made it).
"""
from __future__ import annotations

import json
import os
import re
import tarfile
from dataclasses import dataclass

from trainer.errors import JobError

SAVED_MODEL = "saved_model.pb"
# Beside the SavedModel's own files, where TF Serving looks for nothing but its warm-up file.
RECORD = os.path.join("assets.extra", "trainer-model.json")
ARCHIVE = re.compile(r".*\.(tar\.gz|tgz|tar)$")


@dataclass(frozen=True)
class ModelFound:
    """A SavedModel in the channel: `saved_model` its folder (inside `archive` where one
    holds it), `record` what the exporting job recorded (None: not ours, or older)."""

    channel: str
    saved_model: str
    archive: str | None = None
    record: dict | None = None

    def describe(self) -> str:
        if not self.archive:
            return self.saved_model
        return f"{self.archive}" + (f" ({os.path.basename(self.saved_model)} inside)" if self.saved_model else "")


def find_model(channel) -> ModelFound:
    """The SavedModel of `channel`: in its folder, or the one archive there (not yet opened)."""
    if channel.is_pipe:
        raise JobError(f"channel '{channel.name}': a model channel is read in File or FastFile mode, not Pipe mode "
                       "(set its input mode to File)")
    folder = channel.path
    if not os.path.isdir(folder):
        raise JobError(f"channel '{channel.name}': its folder {folder} does not exist")
    files = sorted(os.path.relpath(os.path.join(root, name), folder)
                   for root, _, names in os.walk(folder, followlinks=True) for name in names)
    models = [os.path.dirname(f) for f in files if os.path.basename(f) == SAVED_MODEL]
    if models:
        chosen = _newest_version(models, f"channel '{channel.name}': {folder}")
        return ModelFound(channel.name, os.path.join(folder, chosen), None,
                          _json_file(os.path.join(folder, chosen, RECORD)))
    archives = [f for f in files if ARCHIVE.fullmatch(f)]
    if len(archives) != 1:
        found = ", ".join(files[:8]) + (", ..." if len(files) > 8 else "") if files else "nothing"
        raise JobError(f"channel '{channel.name}': expected a SavedModel folder ({SAVED_MODEL}) or one model.tar.gz "
                       f"in {folder}; found {found}")
    # An archive is opened by the chief alone (`unpacked`), not by every process that plans.
    return ModelFound(channel.name, "", os.path.join(folder, archives[0]))


def unpacked(found: ModelFound, into: str) -> ModelFound:
    """`found` with its archive unpacked into `into`: its SavedModel's folder there, its record."""
    if not found.archive:
        return found
    channel, archive = found.channel, found.archive
    try:
        with tarfile.open(archive, "r:*") as tar:
            names = tar.getnames()
            models = [os.path.dirname(os.path.normpath(n)) for n in names if os.path.basename(n) == SAVED_MODEL]
            if not models:
                raise JobError(f"channel '{channel}': {archive} holds no SavedModel ({SAVED_MODEL}); it holds "
                               + (", ".join(names[:8]) + (", ..." if len(names) > 8 else "") or "nothing"))
            chosen = _newest_version(models, f"channel '{channel}': {archive}")
            tar.extractall(into, members=[m for m in tar.getmembers() if _under(m.name, chosen)], filter="data")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise JobError(f"channel '{channel}': {archive} is not a readable tar archive, truncated or damaged "
                       f"({err})") from None
    saved_model = os.path.join(into, chosen)
    return ModelFound(channel, saved_model, archive, _json_file(os.path.join(saved_model, RECORD)))


def _under(name: str, folder: str) -> bool:
    name = os.path.normpath(name)
    return not folder or folder == "." or name == folder or name.startswith(folder.rstrip("/") + "/")


def _newest_version(folders: list[str], where: str) -> str:
    """One SavedModel: the only one, or the highest numbered version folder (TF Serving's rule)."""
    if len(folders) == 1:
        return folders[0]
    numbered = [f for f in folders if os.path.basename(f).isdigit()]
    if len(numbered) == len(folders) and len({os.path.dirname(f) for f in folders}) == 1:
        return max(numbered, key=lambda f: int(os.path.basename(f)))
    raise JobError(f"{where} holds several SavedModels ({', '.join(sorted(f or '.' for f in folders))}): keep one, "
                   "or number their folders as versions")


def _json_file(path: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            return _json_bytes(f.read())
    except OSError:
        return None


def _json_bytes(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
