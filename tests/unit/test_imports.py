"""The package's import graph, read from the source (every import, function-local ones
too): no cycle, nothing imports the command line or the `train` entry, imports run one way
down the house's layers, and a top-level name has one meaning."""
import ast
import functools
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trainer"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def parsed(path: pathlib.Path) -> ast.Module:
    """The module's syntax tree. Python 3.11's parser can raise a spurious SystemError ("AST
    constructor recursion depth mismatch", python/cpython#106905) when another thread of the
    process parses at the same time (threads earlier tests left in this worker may): parsed
    again, it is right."""
    try:
        return ast.parse(path.read_text())
    except SystemError:
        return ast.parse(path.read_text())


def imports_of(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports (`from trainer import x` counts as trainer.x)."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    edges = {name: imports_of(path, modules) - {name, "trainer"} for name, path in paths.items()}
    # The mode registry imports every module of its package when first asked (trainer.modes).
    edges["trainer.modes"] |= {name for name in modules if name.startswith("trainer.modes.")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_nothing_imports_the_front_doors():
    """The commands (the `trainer` verbs and `train`) are front doors: only they import each other."""
    edges = graph()
    doors = {name for name in edges if name.startswith("trainer.commands")} | {"trainer.__main__"}
    importers = {name: sorted(targets & doors) for name, targets in edges.items()
                 if targets & doors and name not in doors}
    assert importers == {}


def test_the_plan_depends_on_nothing_that_carries_it_out():
    """Job -> Plan -> Launch -> Worker -> Training: the planner and the modes' rules import
    no launcher, training process or command."""
    later = ("trainer.launch", "trainer.worker", "trainer.training", "trainer.commands", "trainer.script")
    edges = graph()
    reaching_later = {name: sorted(t for t in targets if t.startswith(later))
                      for name, targets in edges.items() if name.startswith("trainer.plan")}
    assert {name: targets for name, targets in reaching_later.items() if targets} == {}


# The house, from its foundations up: a part may import its own layer's parts and those below,
# never one above. The job (contract) is read, a plan is made of the plan's parts (plan) by the
# planner from what the modes declare, a host carries it out (launch; a user's script: script),
# and each training process (worker) runs training with its mode's runtime.
LAYERS = (
    {"errors"},
    {"report", "logs", "pricing", "tf_line"},
    {"cpu"},  # the CPU settings a process gets, from the job's CPUs
    {"contract"},  # what SageMaker gives the job
    {"plan"},  # what a plan is made of, and which mode auto picks from what modes declare
    {"data"},  # the input pipeline
    {"models"},  # DeepFM and the user's hooks
    {"supervision"},  # child processes and peer hosts watched
    {"training"},  # the training loop
    {"modes"},  # each mode: what it declares, how it lays out its processes, its runtime
    {"planner"},  # the job -> the plan
    {"measure"},  # measurements on this machine: probe, tune
    {"worker"},  # one training process
    {"script"},  # a user's script: its processes, requirements and watchers
    {"launch"},  # a host carrying out the plan
    {"local", "kit", "image_environment", "pipe_mode_dataset"},  # what users and the image call
    {"bench"},
    {"commands"},
    {"__main__"},
)


def part_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_imports_run_one_way_down_the_house():
    layer = {part: index for index, parts in enumerate(LAYERS) for part in parts}
    edges = graph()
    assert {part_of(name) for name in edges} - {"trainer"} <= set(layer), "a part of the package has no layer"
    upward = sorted(f"{name} -> {target}" for name, targets in edges.items() for target in targets
                    if name != "trainer" and layer[part_of(target)] > layer[part_of(name)])
    assert upward == []


# What many modules define alike, one meaning each: a command's or benchmark's entry
# (main, add_arguments, run), a launcher's (run), a benchmark's cases, table and charts.
SHARED_NAMES = {"main", "add_arguments", "run", "cases", "table", "charts"}


def test_a_name_has_one_meaning():
    """No two modules define a function or class of one name, but the shared entries above
    (the user scripts of trainer/bench/user_scripts stand alone, as users write them)."""
    defined: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "user_scripts" in path.parts:
            continue
        for node in parsed(path).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, []).append(module_name(path))
    assert {name: modules for name, modules in defined.items()
            if len(modules) > 1 and name not in SHARED_NAMES} == {}
