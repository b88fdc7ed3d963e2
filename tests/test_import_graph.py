"""The package's import structure, read from the source with ``ast`` (nothing is imported).

Standing rules (docs/ARCHITECTURE.md, "Layout"):
* no import circle between modules;
* the kits (settings, checkpoints, core, config, observation, the search, replay, network,
  transport) import no algorithm and no command line;
* an algorithm's folder imports no other algorithm's folder, and the modules shared by
  algorithms (``muzero/algorithms/*.py``) import none;
* the generic command lines and the run loop (``learner``, ``launch``, ``actor``, ``eval``)
  reach the algorithms only through the registry (``muzero.algorithms``), and their code
  names no algorithm.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "muzero")
ALGORITHMS = sorted(d for d in os.listdir(os.path.join(PACKAGE, "algorithms"))
                    if os.path.isfile(os.path.join(PACKAGE, "algorithms", d, "builder.py")))
KITS = ("muzero.config", "muzero.observation", "muzero.cli", "muzero.distribute", "muzero.process",
        "muzero.settings", "muzero.checkpoints", "muzero.core", "muzero.mcts", "muzero.replay",
        "muzero.network", "muzero.rpc")
APPS = ("muzero.learner", "muzero.launch", "muzero.actor", "muzero.eval", "muzero.record")
UPPER = ("muzero.algorithms",) + APPS + ("muzero.warmup", "muzero.plot")


def _modules() -> dict:
    """{dotted module name: parsed tree} of every module of the package."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                dotted = dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted
                with open(path) as f:
                    out[dotted] = ast.parse(f.read(), path)
    return out


MODULES = _modules()


def _imports(tree) -> set:
    """Package modules ``tree`` imports, at any depth (function-level imports count too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("muzero"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("muzero"))
    return {m for m in found if m in MODULES}


EDGES = {name: _imports(tree) - {name} for name, tree in MODULES.items()}


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _algorithm_of(module: str):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "algorithms" and parts[2] in ALGORITHMS else None


def test_the_rules_see_the_package():
    assert {"muzero", "vtrace", "ppo", "r2d2", "sac"} <= set(ALGORITHMS)
    assert "muzero.algorithms.muzero.replay" in EDGES["muzero.algorithms.muzero.learning"]
    assert "muzero.mcts.config" in EDGES["muzero.mcts.search"]


def test_no_import_circle():
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(EDGES[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(EDGES):
        if v not in index:
            visit(v)
    assert circles == []


def test_kits_import_no_algorithm_and_no_command_line():
    bad = [(m, o) for m in EDGES if _under(m, KITS) for o in EDGES[m] if _under(o, UPPER)]
    assert bad == []


def test_an_algorithm_imports_no_other_algorithm():
    bad = [(m, o) for m in EDGES if m.startswith("muzero.algorithms.") for o in EDGES[m]
           if _algorithm_of(o) and _algorithm_of(m) != _algorithm_of(o)]
    assert bad == []


def test_generic_code_reaches_algorithms_through_the_registry_only():
    bad = [(m, o) for m in EDGES if _under(m, APPS) for o in EDGES[m]
           if o.startswith("muzero.algorithms.")]
    assert bad == []
    assert not [(m, o) for m in EDGES if _under(m, ("muzero.launch",)) for o in EDGES[m]
                if _under(o, ("muzero.learner", "muzero.actor", "muzero.eval"))]


def test_generic_code_names_no_algorithm():
    """No string in the generic code is an algorithm's name (docstrings may mention them)."""
    names = set(ALGORITHMS)
    bad = []
    for module, tree in MODULES.items():
        if not _under(module, KITS + APPS):
            continue
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docstrings and node.value in names:
                bad.append((module, node.lineno, node.value))
    assert bad == []
