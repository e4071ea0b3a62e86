"""The shape of the package: small modules, no import cycles, no arrow back up the layers.

The layers follow the data flow (docs/architecture.md): base modules, then environments, then
the parameter server and the replay memory, then the runtimes that place them, then the two
applications (RL training and the supervised benchmark), then the entry points. Inside ``rl``
the mathematics (``rl.algos``) comes first, then the run's config (``rl.config``), then the
processes (actors, learners), then the run that drives them (``rl.run``). A module may import
from its own layer or below; ``rl`` and ``supervised`` never import each other. Imports under
``if TYPE_CHECKING:`` count too: a reader, and a tool that draws the imports, sees them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rltrain"
MAX_LINES = 400

LAYERS: list[tuple[str, ...]] = [
    ("rltrain",),  # base: records, config, faults, errors, perf, checkpoint, ...
    ("rltrain.envs",),
    ("rltrain.ps", "rltrain.replay"),
    ("rltrain.runtime",),
    ("rltrain.rl.algos",),
    ("rltrain.rl.config",),
    ("rltrain.rl", "rltrain.supervised"),
    ("rltrain.rl.run",),
    (
        *("rltrain.launch", "rltrain.launch_bench", "rltrain.cluster_address", "rltrain.api"),
        *("rltrain.cli", "rltrain.cli_checks", "rltrain.cli_parser"),
        *("rltrain.plot", "rltrain.plot_groups", "rltrain.plot_csv", "rltrain.curves"),
        *("rltrain.plot_evals", "rltrain.plot_bench"),
        "rltrain.__init__",
    ),
]
APART = {"rltrain.rl": "rltrain.supervised", "rltrain.supervised": "rltrain.rl"}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 2:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, those under ``if TYPE_CHECKING:`` included."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                pkg = package
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            target = _resolve(name)
            if target and target != module:
                targets.add(target)
    return targets


GRAPH = {m: imports_of(m) for m in MODULES}


def _app(package: str) -> str:
    """``rltrain.rl`` for every package under it (``rltrain.rl.algos``), and so on."""
    return ".".join(package.split(".")[:2])


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the layer's package) of the longest prefix that names one."""
    best = (0, "rltrain")
    for i, packages in enumerate(LAYERS):
        for p in packages:
            if (module == p or module.startswith(p + ".")) and len(p) >= len(best[1]):
                best = (i, p)
    return best


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_is_over_the_size_limit() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_there_is_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    back = []
    for module, targets in GRAPH.items():
        mine, package = layer_of(module)
        for target in targets:
            theirs, other = layer_of(target)
            if theirs > mine or APART.get(_app(package)) == _app(other):
                back.append(f"{module} -> {target}")
    assert back == []


def test_the_walker_sees_a_cycle_and_a_back_arrow() -> None:
    """The checks themselves: a made-up graph with a cycle is caught, and so is an arrow up."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert layer_of("rltrain.ps.shard")[0] < layer_of("rltrain.runtime.ray.wire")[0]
    assert layer_of("rltrain.records") == (0, "rltrain")


@pytest.mark.parametrize("name", ["rltrain.rl.run.plans", "rltrain.rl.run.train"])
def test_the_graph_holds_the_modules_it_names(name: str) -> None:
    assert name in GRAPH and GRAPH[name]
