"""The package's shape, as docs/architecture.md states it: imports go one way (no module imports
another that imports it back, directly or round a circle, counting imports inside functions too),
no module over 400 lines and no function over 60 outside pipeline/bench."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"
OURS = ("pipeline", "tasks")


def _modules(packages=("pipeline",)) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in (PACKAGE.parent / package).rglob("*.py"):
            name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path, modules: dict) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in OURS)
    return {m for m in found if m in modules}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_circle_finder_sees_a_circle():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    assert import_circles(graph) == []


def _production() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "bench" not in p.relative_to(PACKAGE).parts]


def test_modules_under_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _production() if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_functions_under_60_lines():
    limit, long = 60, []
    for path in _production():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                long.append(f"{path.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1})")
    assert long == []


WORKER_SIDE = ("pipeline.worker", "pipeline.steps")
CLIENT_SIDE = ("pipeline.client", "pipeline.jobs", "pipeline.service", "pipeline.cluster")


def _side_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports from the workers' code into the client's, and from ``data`` into either side."""

    def within(module, packages):
        return any(module == p or module.startswith(p + ".") for p in packages)

    found = []
    for module, imports in graph.items():
        if within(module, WORKER_SIDE):
            found += [f"{module} -> {i}" for i in imports if within(i, CLIENT_SIDE)]
        if within(module, ("pipeline.data",)):
            found += [f"{module} -> {i}" for i in imports if within(i, WORKER_SIDE + CLIENT_SIDE)]
    return sorted(found)


def test_side_check_sees_a_crossing():
    assert _side_crossings(
        {
            "pipeline.steps.a": {"pipeline.jobs.b"},
            "pipeline.jobs.b": {"pipeline.steps.a"},
            "pipeline.data.c": {"pipeline.worker.d"},
        }
    ) == ["pipeline.data.c -> pipeline.worker.d", "pipeline.steps.a -> pipeline.jobs.b"]


def test_worker_code_never_imports_client_code():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    assert _side_crossings(graph) == []


# The house, top floor first (docs/architecture.md, "Layout"): a module imports only its own floor's
# and those below. The command line calls the service, the benchmark, the client and the jobs; the
# client (``Pipeline``) runs jobs; jobs start and watch clusters' tasks; the tasks run on the
# workers; ``data``, the base modules (config, names, results, ...) and the task kinds (tasks/) are
# for everyone.
FLOORS = [
    ("pipeline", "pipeline.__main__", "pipeline.cli"),  # the public face and the command line
    ("pipeline.service", "pipeline.bench"),
    ("pipeline.client",),
    ("pipeline.jobs",),
    ("pipeline.cluster",),
    ("pipeline.scheduler",),
    ("pipeline.steps",),
    ("pipeline.worker",),
    ("pipeline.data",),
    (),  # the base: every other module of pipeline/ (pipeline.config, pipeline.names, ...)
    ("tasks",),  # the task kinds and their registry: they import nothing of pipeline/
]
BASE = len(FLOORS) - 2
# Imports that climb, each for the reason docs/architecture.md gives.
CLIMBS_EXPLAINED = {
    # the worker process's start-up imports the answer tasks' modules while its engine starts
    ("pipeline.worker.preload", "pipeline.steps.cluster_tasks"),
}


def _floor(module: str) -> int:
    for number, packages in enumerate(FLOORS):
        if any(module == p if p == "pipeline" else module == p or module.startswith(p + ".") for p in packages):
            return number
    return BASE


def _climbs(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a floor to one above it."""
    return sorted(
        f"{m} -> {i}"
        for m, imports in graph.items()
        for i in imports
        if _floor(i) < _floor(m) and (m, i) not in CLIMBS_EXPLAINED
    )


def test_climb_check_sees_a_climb():
    assert _climbs(
        {
            "pipeline.jobs.a": {"pipeline.client.b", "pipeline.data.c"},
            "tasks.x": {"pipeline.names"},
            "pipeline.cli.run": {"pipeline.jobs.a"},
            "pipeline.names": {"tasks.x"},
        }
    ) == ["pipeline.jobs.a -> pipeline.client.b", "tasks.x -> pipeline.names"]


def test_no_import_climbs_back_up_the_house():
    modules = _modules(OURS)
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    assert _climbs(graph) == []
    assert all(i in graph.get(m, ()) for m, i in CLIMBS_EXPLAINED)  # (each exception still there)


# A task's name compared outside tasks/ (``config.task == "embed"``, ``task in ("classify", "score")``):
# what a task reads, writes and needs is its ``TaskSpec``'s to say (tasks/registry.py).
TASK_NAME_COMPARED = re.compile(
    r"""(\btask\w*\b(\([^)]*\))?|getattr\([^)]*"name"[^)]*\))\s*"""
    r"""(==|!=|\bnot in\b|\bin\b)\s*\(?\s*"""
    r"""["'](document_question|template|generate|chat|embed|classify|score)["']"""
)


def _task_name_comparisons(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if TASK_NAME_COMPARED.search(line)]


def test_task_name_check_sees_a_comparison():
    found = _task_name_comparisons(
        'if config.task in ("classify", "score"):\n'
        'x = getattr(task, "name", None) == "embed"\nif job.steps.task_name(c) != "chat":\n'
        'if "classify" in engine.tasks:\nif spec(config.task).reads_labels:'
    )
    assert len(found) == 3


def test_no_task_name_is_compared_outside_tasks():
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _task_name_comparisons(path.read_text())
    ]
    assert found == []


def test_every_package_is_installed():
    """pyproject.toml lists its packages by name: a new folder left out would be missing from a
    non-editable install."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()
