"""A script's requirements.txt, installed without moving the image's training stack.

TensorFlow, Horovod and tensorflow-io are compiled against exact versions of numpy,
protobuf and TensorFlow itself; pip replaces any of them when a line (or a package a line
pulls in) asks for another version, and the job then dies inside `import tensorflow` with
an error that names neither. So, before pip runs:

- every line that names a pinned package with a version the image does not have fails the
  job, naming the file, the line and the pinned version (`core_pins`, `check_requirements`);
- pip itself runs under a constraints file of those pins (PIP_CONSTRAINT, which pip reads
  however the toolkit calls it), so a package that needs another numpy fails to resolve
  instead of replacing it; `explain_pip_failure` turns pip's conflict into one line.

`allow_pin_changes=true` (hyperparameter) turns both off for a user who means it.
Where SageMaker gives a warm pool's persistent cache, pip's cache lives there
(`pip_environment`), so a job on a warm instance installs from it.
"""
from __future__ import annotations

import logging
import os
import re
from importlib import metadata

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from trainer.errors import JobError

log = logging.getLogger("trainer")

# What TensorFlow, Horovod and tensorflow-io in the image were built or tested against.
CORE_PACKAGES = ("intel-tensorflow", "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "keras", "numpy",
                 "protobuf", "horovod", "mpi4py", "tensorflow-io", "tensorflow-io-gcs-filesystem",
                 "sagemaker-training", "sagemaker-tensorflow")
# Other names TensorFlow is published under: installing one beside the image's would put a
# second TensorFlow over the first.
TENSORFLOW_NAMES = frozenset({"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "intel-tensorflow",
                              "tensorflow-intel"})
OVERRIDE = "allow_pin_changes"
WARM_POOL_CACHE = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
# pip's options in a requirements file that name another file of requirements.
INCLUDE = re.compile(r"^(?:-r|--requirement)(?:\s+|=)(\S+)$")
VCS_EGG = re.compile(r"#egg=([A-Za-z0-9][A-Za-z0-9._-]*)")


def core_pins() -> dict[str, str]:
    """The installed versions of the pinned packages, by canonical name (TensorFlow's other
    names included, at the installed TensorFlow's version)."""
    pins = {}
    for name in CORE_PACKAGES:
        try:
            pins[canonicalize_name(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return pins


def check_requirements(path: str, pins: dict[str, str], allow_changes: bool = False) -> list[str]:
    """Fail (JobError naming the line) on a line of `path` (and the files it includes) that
    would change a pinned package; with `allow_changes`, return those lines to warn of."""
    changes = []
    for where, line in _requirement_lines(path):
        change = _pin_change(line, pins)
        if change is None:
            continue
        if not allow_changes:
            raise JobError(f"{where}: '{line}' {change}, which TensorFlow, Horovod and tensorflow-io in "
                           f"this image were built against. Remove the line (the image's version is "
                           f"installed), or set the hyperparameter {OVERRIDE}=true to install it anyway")
        changes.append(f"{where}: '{line}' {change}")
    return changes


def _pin_change(line: str, pins: dict[str, str]) -> str | None:
    """What the requirement `line` would do to a pinned package, or None if nothing."""
    vcs = VCS_EGG.search(line)
    if vcs and "://" in line:
        name = canonicalize_name(vcs.group(1))
        if name in pins or name in TENSORFLOW_NAMES:
            return f"would build {name} from source over the image's {name} {pins.get(name, '')}".rstrip()
        return None
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return None  # pip names what it cannot read
    if requirement.marker is not None and not requirement.marker.evaluate(default_environment()):
        return None  # not for this Python or platform
    name = canonicalize_name(requirement.name)
    if name in TENSORFLOW_NAMES and name not in pins:
        installed = next((f"{n} {pins[n]}" for n in sorted(TENSORFLOW_NAMES) if n in pins), None)
        return f"would install a second TensorFlow ({name}) beside the image's {installed}" if installed else None
    if name not in pins:
        return None
    if requirement.url:
        return f"would replace the image's {name} {pins[name]} with {requirement.url}"
    if not requirement.specifier.contains(pins[name], prereleases=True):
        return f"would replace the image's {name} {pins[name]}"
    return None


def _requirement_lines(path: str, seen: frozenset = frozenset()):
    """(where, requirement) for each requirement of a pip requirements file: comments and
    continuations as pip reads them, `-r` files followed; other options left to pip."""
    path = os.path.abspath(path)
    if path in seen:
        return
    with open(path) as f:
        physical = f.read().splitlines()
    number, pending, start = 0, "", 0
    for number, text in enumerate(physical, start=1):
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1]
            continue
        logical, pending = (pending + text), ""
        logical = re.sub(r"(^|\s)#.*$", "", logical).strip()
        if not logical:
            continue
        include = INCLUDE.match(logical)
        if include:
            yield from _requirement_lines(os.path.join(os.path.dirname(path), include.group(1)), seen | {path})
        elif not logical.startswith("-"):
            yield f"{os.path.basename(path)} line {start}", logical
    if pending:
        yield f"{os.path.basename(path)} line {start}", pending.strip()


def pip_environment(pins: dict[str, str], work_dir: str, allow_changes: bool = False) -> dict[str, str]:
    """Environment for every pip run that installs the user's code: the pins as constraints
    (unless allowed to change), and pip's cache in the warm pool's persistent folder."""
    env = {}
    if not allow_changes and pins:
        os.makedirs(work_dir, exist_ok=True)
        constraints = os.path.join(work_dir, "image-pins.txt")
        with open(constraints, "w") as f:
            f.write("# The image's training stack (trainer.script.requirements)\n")
            f.writelines(f"{name}=={version}\n" for name, version in sorted(pins.items()))
        env["PIP_CONSTRAINT"] = constraints
    cache = os.environ.get(WARM_POOL_CACHE)
    if cache:
        env["PIP_CACHE_DIR"] = os.path.join(cache, "pip")
    return env


def explain_pip_failure(output: str, pins: dict[str, str]) -> str | None:
    """One line for pip's dependency conflict with a pin ("needs numpy>=2; the image has
    numpy 1.26.4"), or None when pip failed for another reason."""
    lines = [line.strip() for line in output.splitlines()]
    if "The conflict is caused by:" not in lines:
        return None
    causes = lines[lines.index("The conflict is caused by:") + 1:]
    causes = causes[:next((i for i, line in enumerate(causes) if not line), len(causes))]
    needs = [line for line in causes if "(constraint)" not in line]
    pinned = sorted({name for name in pins for line in causes
                     if re.search(rf"\b{re.escape(name)}\b", line, re.IGNORECASE)})
    if not pinned:
        return None
    has = ", ".join(f"{name} {pins[name]}" for name in pinned)
    return (f"requirements.txt needs a version of a package this image pins ({'; '.join(needs)}); the image has "
            f"{has}, which TensorFlow, Horovod and tensorflow-io were built against. Use a version of the "
            f"package that accepts it, or set the hyperparameter {OVERRIDE}=true to install it anyway")
