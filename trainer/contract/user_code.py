"""The user's entry point (`sagemaker_program` in `sagemaker_submit_directory`): fetch it,
and tell a hooks module from a training script by reading its source, never by running it.

A hooks module defines `model_fn`, `parse_fn` or `optimizer_fn` at its top level, with the
hooks' parameters, and does nothing else when imported; the container trains with them.
Anything else is a training script, run as AWS's TensorFlow
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
# The hooks and their parameters (trainer.models.hooks, docs/your-model.md).
HOOK_SIGNATURES = {"model_fn": ("hyperparameters",), "parse_fn": ("serialized", "hyperparameters"),
                   "optimizer_fn": ("hyperparameters",)}
HOOK_NAMES = tuple(HOOK_SIGNATURES)
# What only Keras 3 has: a script that uses one of these was written for TensorFlow 2.16 or
# later (tf.keras is Keras 3 there too), and fails inside Keras 2 on the 2.14 line.
KERAS_3_ONLY = ("keras.ops", "keras.config", "keras.random", "keras.distribution", "keras.utils.PyDataset",
                "keras.src", "keras_hub")


@dataclass(frozen=True)
class EntryPoint:
    program: str  # the name SageMaker passes: train.py, train.sh, a module of a package
    code_dir: str  # where it is (local)
    kind: str  # hooks | script
    why: str
    hooks: tuple[str, ...] = ()  # the hooks it defines (a script may define some too)
    keras_3: str = ""  # where it uses what only Keras 3 has ("line 12: keras.ops"), if it does
    horovod_keras: str = ""  # where it imports a Keras API of Horovod ("line 3: horovod.keras"), if it does
    keras_module: str = ""  # where it imports Keras itself, not tf.keras ("line 2: keras"), if it does

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


def _runs_something(node: ast.AST) -> bool:
    """Whether evaluating this expression or statement calls anything (or awaits, yields)."""
    return any(isinstance(inner, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)) for inner in ast.walk(node))


def _first_action(body: list[ast.stmt], source: str) -> str | None:
    """Where a module's top level does something when imported, in words; None when it only
    imports, defines (functions, classes, with their decorators), documents and assigns
    constants (conditionally too: `try: import x` / `if X:`)."""
    for node in body:
        if _is_main_guard(node):
            return f"has a __main__ guard (line {node.lineno})"
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Pass, ast.Global, ast.Nonlocal)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring, or any bare literal
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and not _runs_something(node):
            continue  # a constant
        if isinstance(node, ast.If) and not _runs_something(node.test):
            inner = _first_action(node.body, source) or _first_action(node.orelse, source)
        elif isinstance(node, ast.Try):
            inner = next(filter(None, (_first_action(part, source) for part in
                                       [node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody])),
                         None)
        else:
            inner = f"runs code at its top level (line {node.lineno}: {_excerpt(node, source)})"
        if inner:
            return inner
    return None


def _excerpt(node: ast.stmt, source: str, limit: int = 60) -> str:
    text = (ast.get_source_segment(source, node) or type(node).__name__).splitlines()[0].strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _required_positional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int | None]:
    """(parameters a caller must pass by position, the most it may pass; None: any)."""
    arguments = function.args
    positional = len(arguments.posonlyargs) + len(arguments.args)
    return positional - len(arguments.defaults), None if arguments.vararg else positional


def _hook_shape_problem(function) -> str | None:
    """Why a top-level function named like a hook is not one (None: it is), e.g. the
    Estimator API's `model_fn(features, labels, mode)`."""
    wanted = HOOK_SIGNATURES[function.name]
    required, most = _required_positional(function)
    if required <= len(wanted) <= (most if most is not None else len(wanted)):
        return None
    arguments = function.args
    names = ", ".join(a.arg for a in [*arguments.posonlyargs, *arguments.args])
    estimator = " (the Estimator API's model_fn)" if function.name == "model_fn" and required >= 3 else ""
    return f"defines {function.name}({names}){estimator}, not the hook {function.name}({', '.join(wanted)})"


def classify_source(source: str, filename: str) -> tuple[str, str, tuple[str, ...]]:
    """(kind, why, the hooks it defines) of a Python entry point from its syntax tree (pure:
    nothing runs).

    Hooks only when importing it does nothing but define them: its top level holds only
    imports, definitions, docstrings and constants, and each top-level function named like a
    hook has that hook's parameters. A `__main__` guard, any top-level call (argparse,
    `fit`, `train_and_evaluate`) or a `model_fn(features, labels, mode)` make it a script."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        raise JobError(f"entry point {filename}: line {err.lineno}: {err.msg}") from None
    named = [node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in HOOK_SIGNATURES]
    misshaped = [problem for problem in map(_hook_shape_problem, named) if problem]
    hooks = [node.name for node in named if not _hook_shape_problem(node)]
    action = _first_action(tree.body, source)
    if hooks and not misshaped and not action:
        return HOOKS, f"{filename} defines {', '.join(hooks)} at its top level and runs nothing when imported", \
            tuple(hooks)
    reasons = misshaped + ([action] if action else [])
    if not named:
        reasons.insert(0, f"defines no hook ({', '.join(HOOK_NAMES)})")
    why = f"{filename} {'; '.join(reasons)}: a training script, run as AWS's TensorFlow container runs it"
    if hooks:
        why += f" (to train its {', '.join(hooks)} as hooks instead, set the hyperparameter entry_point_kind=hooks)"
    return SCRIPT, why, tuple(hooks)


def _dotted(node: ast.AST) -> str:
    """`a.b.c` of an attribute chain on a name, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def keras_3_use(source: str) -> str:
    """Where the source first uses what only Keras 3 has ("line 12: keras.ops"), or "" (pure)."""
    return _first_use(source, KERAS_3_ONLY, attributes=True)


# Horovod's two Keras APIs: for tf.keras (Keras 2 only: its optimizer wrapper overrides Keras
# 2's optimizer methods) and for the standalone Keras 2 package (`import keras`).
HOROVOD_KERAS = ("horovod.tensorflow.keras", "horovod.keras")


def horovod_keras_use(source: str) -> str:
    """Where the source imports one of Horovod's Keras APIs ("line 3: horovod.keras"), or "": an
    import inside a `try` (Horovod when it is there, something else when not) does not count."""
    return _first_use(source, HOROVOD_KERAS, attributes=False)


def keras_module_use(source: str) -> str:
    """Where the source imports the `keras` package itself ("line 2: keras"), or "": Keras 3 on
    the 2.21 line, Keras 2.14 on the 2.14 line, where tf.keras is the same Keras."""
    return _first_use(source, ("keras",), attributes=False)


def _first_use(source: str, markers: tuple[str, ...], attributes: bool) -> str:
    """Where the source first names one of `markers` (modules, or their attributes when
    `attributes`: `tf.keras.ops` is `keras.ops`), outside `try` blocks for imports."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    guarded = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.Try)
               for statement in node.body for inner in ast.walk(statement)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and attributes:
            names = [_dotted(node).removeprefix("tf.")]
        elif isinstance(node, ast.ImportFrom) and node.module and id(node) not in guarded:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        elif isinstance(node, ast.Import) and id(node) not in guarded:
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            marker = next((m for m in markers if name == m or name.startswith(m + ".")), None)
            if marker:
                found.append((node.lineno, marker))
    return "line {}: {}".format(*min(found)) if found else ""


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
        source = f.read()
    kind, why, hooks = classify_source(source, program)
    return EntryPoint(program, code_dir, kind, why, hooks, keras_3_use(source), horovod_keras_use(source),
                      keras_module_use(source))


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
