"""pathgrad's modules import each other without cycles and only downwards through the layers.

Type-only and lazy imports count, and so do ``importlib.import_module("pathgrad...")``
calls with a literal name. The layers are those of docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "pathgrad"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the pathgrad modules it imports anywhere in its source."""
    names = module_names()

    def owner(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif _literal_import_module(node):
                targets = [node.args[0].value]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            else:
                continue
            for target in targets:
                found = owner(target)
                if found is not None and found != name and found != "pathgrad":
                    graph[name].add(found)
    return graph


def _literal_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("pathgrad....")`` (or ``import_module(...)``) with a literal."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    first = node.args[0]
    return (
        name == "import_module"
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith("pathgrad")
    )


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_another_in_a_circle():
    graph = import_graph()
    assert "pathgrad.runs.lifecycle" in graph["pathgrad.commands.training"]  # it sees imports
    assert "pathgrad.trainer.trainer" not in graph["pathgrad.checkpoint"]
    assert cycles(graph) == []


def test_the_graph_sees_importlib_loads_and_no_env_imports_the_registrys_lookups():
    graph = import_graph()
    assert "pathgrad.envs" in graph["pathgrad"]  # importlib.import_module("pathgrad.envs")
    assert "pathgrad.envs" in graph["pathgrad.env"]  # the lookups register the built-in envs
    importers = sorted(name for name, targets in graph.items() if "pathgrad.env" in targets)
    assert [name for name in importers if name.startswith("pathgrad.envs")] == []


def test_the_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


# Bottom to top; a module may import its own layer and those below it. A module belongs to the
# layer of the longest prefix naming it.
LAYERS = (
    ("core", ("pathgrad.core",)),
    ("env", ("pathgrad.env", "pathgrad.envs")),
    (
        "reference core",
        (
            "pathgrad.policies",
            "pathgrad.squashed_normal",
            "pathgrad.mlp",
            "pathgrad.models",
            "pathgrad.normalization",
            "pathgrad.gradients",
            "pathgrad.collector",
            "pathgrad.evaluation",
            "pathgrad.checkpoint",
            "pathgrad.utils",
            "pathgrad.algo",
        ),
    ),
    ("compiled", ("pathgrad.compiled",)),
    ("trainer", ("pathgrad.trainer", "pathgrad.differentiable_trainer", "pathgrad.distributed")),
    ("experimental", ("pathgrad.experimental",)),  # the reference's experimental tasks
    # what acts on a trained policy or an env: deployment, drawings, env checks
    ("policy and env tools", ("pathgrad.export", "pathgrad.rendering", "pathgrad.testing")),
    ("runs", ("pathgrad.runs",)),  # a run's whole life: the Python API and the CLI call it
    ("python api", ("pathgrad.api",)),
    # the command line: argparse adapters over the run; nothing below imports them
    (
        "command line",
        ("pathgrad", "pathgrad.__main__", "pathgrad.cli", "pathgrad.console", "pathgrad.commands"),
    ),
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the longest prefix naming ``module``, or None."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = prefix != "pathgrad" and module.startswith(prefix + ".")  # the package alone
            named = module == prefix or below
            if named and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(module):
                below, above = LAYERS[layer_of(module)][0], LAYERS[layer_of(target)][0]
                found.append(f"{module} ({below}) imports {target} ({above})")
    return found


def test_every_module_has_a_layer():
    assert [name for name in import_graph() if layer_of(name) is None] == []


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(import_graph()) == []


def test_the_check_finds_an_upward_import():
    graph = {"pathgrad.checkpoint": {"pathgrad.runs.run"}, "pathgrad.runs.run": set()}
    assert upward_imports(graph) == [
        "pathgrad.checkpoint (reference core) imports pathgrad.runs.run (runs)"
    ]
    assert layer_of("pathgrad.envs.newton.engine.bridge") == 1
    assert layer_of("pathgrad.environment") is None  # a prefix names whole modules only
