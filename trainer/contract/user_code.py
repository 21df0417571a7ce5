"""The user's entry point (`sagemaker_program` in `sagemaker_submit_directory`): fetch it,
and tell a hooks module from a training script by reading its source, never by running it.

A hooks module defines `model_fn`, `parse_fn` or `optimizer_fn` at its top level and the
container trains with them. Anything else is a training script, run as AWS's TensorFlow
container runs it: a Python file with its own `model.fit`, a shell script, or a package
with a `setup.py` (the SageMaker training toolkit's three kinds of entry point). The
hyperparameter `entry_point_kind` (hooks or script) overrides the decision.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from trainer.errors import JobError

HOOKS, SCRIPT = "hooks", "script"
HOOK_NAMES = ("model_fn", "parse_fn", "optimizer_fn")


@dataclass(frozen=True)
class EntryPoint:
    program: str  # the name SageMaker passes: train.py, train.sh, a module of a package
    code_dir: str  # where it is (local)
    kind: str  # hooks | script
    why: str

    @property
    def path(self) -> str:
        return os.path.join(self.code_dir, self.program)

    @property
    def is_script(self) -> bool:
        return self.kind == SCRIPT


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":`"""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                   for c in test.comparators))


def classify_source(source: str, filename: str) -> tuple[str, str]:
    """(kind, why) of a Python entry point from its syntax tree (pure: nothing runs)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        raise JobError(f"entry point {filename}: line {err.lineno}: {err.msg}") from None
    hooks = [node.name for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in HOOK_NAMES]
    if hooks:
        return HOOKS, f"{filename} defines {', '.join(hooks)} at its top level"
    if any(_is_main_guard(node) for node in tree.body):
        return SCRIPT, f"{filename} defines no hook ({', '.join(HOOK_NAMES)}) and has a __main__ guard"
    return SCRIPT, f"{filename} defines no hook ({', '.join(HOOK_NAMES)}): a script that runs at its top level"


def classify(program: str, code_dir: str, override: str = "auto") -> EntryPoint:
    """The entry point's kind: the hyperparameter if it says, else from its file."""
    path = os.path.join(code_dir, program)
    if override != "auto":
        return EntryPoint(program, code_dir, override, f"entry_point_kind={override} (hyperparameter)")
    if not program.endswith(".py"):
        return EntryPoint(program, code_dir, SCRIPT, f"{program} is not a Python file: run as a command")
    if os.path.isfile(os.path.join(code_dir, "setup.py")):
        return EntryPoint(program, code_dir, SCRIPT, f"{code_dir} is a package (setup.py): run as a module")
    if not os.path.isfile(path):
        raise JobError(f"entry point {program} (sagemaker_program) is not in {code_dir} "
                       f"(sagemaker_submit_directory); it holds: {', '.join(sorted(os.listdir(code_dir))) or 'nothing'}")
    with open(path, encoding="utf-8", errors="replace") as f:
        kind, why = classify_source(f.read(), program)
    return EntryPoint(program, code_dir, kind, why)


def locate(program: str, submit_directory: str, override: str = "auto") -> EntryPoint:
    """The entry point, fetched and classified."""
    return classify(program, fetch(submit_directory, program), override)


def fetch(submit_directory: str, program: str) -> str:
    """A local folder holding the code: `sagemaker_submit_directory` itself when it is one
    (local mode mounts it), else the toolkit's code dir, where the toolkit downloads and
    unpacks it (S3 or a tarball) as its `entry_point.run` would; once per host: the
    processes this host starts find it there."""
    if os.path.isdir(submit_directory):
        return submit_directory
    from sagemaker_training import environment, files

    if os.path.exists(os.path.join(environment.code_dir, program)):
        return environment.code_dir

    try:
        files.download_and_extract(uri=submit_directory, path=environment.code_dir)
    except Exception as err:  # S3 errors, a corrupt tarball
        raise JobError(f"sagemaker_submit_directory {submit_directory}: cannot fetch the code: "
                       f"{type(err).__name__}: {err}") from err
    return environment.code_dir
