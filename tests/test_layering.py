"""The import structure: no cycles among app/ modules, and the layers point one way.

Every Import / ImportFrom node of every module is read with `ast`, top-level and deferred
(inside functions) alike: a deferred import still makes one module depend on another, it only
hides the dependency from whoever reads the top of the file. Rules:

  * `import a.b.c` depends on module a.b.c (not on its parent packages: each package's
    __init__ is a module of its own, and importing a.b.c runs a/__init__ first only as a
    side effect that every module of the package shares);
  * `from a.b import c` depends on a.b.c when that is a module of the project, else on a.b;
  * relative imports are resolved against the importing module's package.

Run `python tests/test_layering.py` to print the cycles and the layer violations found.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "visualizations", "demo_models", "research")  # top-level project packages


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Module name -> file, for every .py file of the project packages."""
    found = {}
    for package in PACKAGES:
        if (ROOT / package).is_dir():
            for path in sorted((ROOT / package).rglob("*.py")):
                found[_module_name(path)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (`from ..x import y` inside app.ui.handlers: app.x)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set[str], skip: tuple[str, ...] = ()) -> set[str]:
    """Every module (project or not) that `module` imports, anywhere in its file but inside the
    top-level functions named in `skip`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in skip)]
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in known else source)
    found.discard(module)
    return found


def graph(skip: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """Module -> the project modules it imports (outside its top-level functions named in skip)."""
    modules = project_modules()
    known = set(modules)
    return {m: imports_of(m, p, known, skip) & known for m, p in modules.items()}


def _sccs(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), iterative; each sorted, largest first."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop(); on_stack.discard(m); component.append(m)
                        if m == node:
                            break
                    out.append(sorted(component))
    return sorted(out, key=lambda c: (-len(c), c))


def _shortest_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as [a, b, ..., a]."""
    start, inside = component[0], set(component)
    parent, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & inside):
                if child == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return component


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def cycles(prefixes: tuple[str, ...] = ("app",), skip: tuple[str, ...] = ()) -> list[dict]:
    """Each import cycle that runs through a module under `prefixes`: its modules and one cycle
    through them. The whole project's graph is searched, so a loop that leaves app/ and comes
    back (app -> demo_models.presets -> app) counts. skip: as graph()."""
    edges = graph(skip)
    return [{"modules": c, "cycle": _shortest_cycle(edges, c)} for c in _sccs(edges)
            if len(c) > 1 and any(_under(m, prefixes) for m in c)]


def violations(importers: tuple[str, ...], forbidden: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, imported) for each module under `importers` that imports one under `forbidden`
    (project or third-party: the whole file's imports are checked, not only project ones)."""
    modules = project_modules()
    known = set(modules)
    hits = []
    for module, path in modules.items():
        if not _under(module, importers):
            continue
        for dep in sorted(imports_of(module, path, known)):
            if _under(dep, forbidden):
                hits.append((module, dep))
    return hits


def _show(found: list[dict]) -> str:
    return "\n".join(" -> ".join(c["cycle"]) + f"   (all in the loop: {', '.join(c['modules'])})"
                     for c in found)


def test_the_parser_sees_deferred_and_relative_imports(tmp_path):
    source = ("import a.b.c\nfrom . import sibling\nfrom .. import top\nfrom .mod import name\n"
              "def f():\n    from x.y import z\n    import torch\n")
    path = tmp_path / "m.py"
    path.write_text(source)
    known = {"pkg.sub.sibling", "pkg.top", "pkg.sub.mod", "x.y"}
    assert imports_of("pkg.sub.m", path, known) == {
        "a.b.c", "pkg.sub.sibling", "pkg.top", "pkg.sub.mod", "x.y", "torch"}


def test_the_cycle_finder_reports_a_loop():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _sccs(edges)[0] == ["a", "b", "c"]
    assert _shortest_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles_through_app_or_visualizations():
    found = cycles(("app", "visualizations"))
    assert not found, "import cycles:\n" + _show(found)


def test_the_labs_measuring_code_has_no_import_cycles():
    """research/'s modules depend on each other one way; only command-line entry points (`main`:
    `train` goes on to `evaluate`, `evaluate --pair smollm2` hands over to evaluate_smollm2) may
    call a module that depends on theirs."""
    found = cycles(("research",), skip=("main",))
    assert not found, "import cycles:\n" + _show(found)
    assert cycles(("research",)), "the entry points' loops are what `skip` sets aside"


def test_settings_is_a_leaf():
    """app.settings (DecodeSettings, the limits, InputError, ModelLoadError) imports nothing
    from the project: everything may depend on it."""
    assert not graph()["app.settings"]


def test_the_lessons_compute_without_pictures_or_the_ui():
    """app.lessons returns plain data; the UI (app.ui.lessons) draws it with visualizations."""
    hits = violations(("app.lessons",), ("visualizations", "gradio", "app.ui"))
    assert not hits, "\n".join(f"{m} imports {d}" for m, d in hits)


def test_app_and_visualizations_do_not_import_the_lab():
    """The product (app/) and its pictures (visualizations/) run without the research code."""
    hits = violations(("app", "visualizations"), ("research", "demo_models"))
    assert not hits, "\n".join(f"{m} imports {d}" for m, d in hits)


def test_visualizations_need_neither_torch_nor_gradio():
    """visualizations/ draws from a Trace (app.trace) and numbers: it runs without torch or gradio."""
    hits = violations(("visualizations",), ("torch", "gradio"))
    assert not hits, "\n".join(f"{m} imports {d}" for m, d in hits)


def test_modules_stay_short_enough_to_read():
    """A module of app/ fits in 400 lines, a UI module (app/ui/) in 300 (issue 36's layout)."""
    long = [(p.relative_to(ROOT).as_posix(), n) for p in sorted((ROOT / "app").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > (300 if p.parent.name == "ui" else 400)]
    assert not long, long


if __name__ == "__main__":
    everything = graph()
    for c in _sccs(everything):
        if len(c) > 1:
            print(f"cycle ({len(c)} modules): {' -> '.join(_shortest_cycle(everything, c))}")
            print(f"    all in the loop: {', '.join(c)}")
    for m, d in violations(("app", "visualizations"), ("research", "demo_models")):
        print(f"lab import: {m} imports {d}")
    for m, d in violations(("visualizations",), ("torch", "gradio")):
        print(f"visualizations import: {m} imports {d}")
    for m, d in violations(("app.lessons",), ("visualizations", "gradio", "app.ui")):
        print(f"lessons import: {m} imports {d}")
    sys.exit(0)
