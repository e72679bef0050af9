"""The suite's layering, read from the sources (docs/design.md): deepjit knows no library, libraries
don't know each other, ``reference/`` is the oracle (it imports no optimised path and no table),
``host/`` and ``ascend/`` never import each other, and no package has an import circle — counting
imports inside functions, which is how circles usually hide."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # import name -> source folder
    "deepjit": ROOT / "deepjit" / "deepjit",
    "deep_gemm": ROOT / "deepgemm_ascend" / "deep_gemm",
    "deep_ep": ROOT / "deepep_ascend" / "deep_ep",
    "flash_mla": ROOT / "flashmla" / "flash_mla",
    "tile_kernels": ROOT / "tilekernels" / "tile_kernels",
    "deepseek_layers": ROOT / "integration" / "deepseek_layers",
}
LIBRARIES = ("deep_gemm", "deep_ep", "flash_mla", "tile_kernels")


def _module_name(pkg: str, path: Path) -> str:
    rel = path.relative_to(PACKAGES[pkg]).with_suffix("")
    parts = [pkg, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(pkg: str) -> dict[str, Path]:
    return {_module_name(pkg, p): p for p in sorted(PACKAGES[pkg].rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the suite that ``name`` imports, at any depth of its source (absolute names;
    ``from x import y`` counts ``x.y`` when that is a module, else ``x``)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + (node.module.split(".") if node.module else []))
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in known else mod)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _graph(pkg: str) -> dict[str, set[str]]:
    mods = _modules(pkg)
    known = set(mods)
    for other in PACKAGES:
        if other != pkg:
            known |= set(_modules(other))
    return {m: _imports(m, p, known) for m, p in mods.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    for layer in ("reference", "host", "ascend"):
        if layer in parts[1:]:
            return layer
    return "table" if parts[-1] == "_dispatch" else None


@pytest.mark.parametrize("pkg", list(PACKAGES))
def test_packages_import_only_what_their_layer_may(pkg):
    bad = []
    for mod, deps in _graph(pkg).items():
        for dep in deps:
            top = dep.split(".")[0]
            if pkg == "deepjit" and top != "deepjit":
                bad.append(f"{mod} -> {dep} (deepjit knows no library)")
            elif pkg in LIBRARIES and top != pkg and top != "deepjit":
                bad.append(f"{mod} -> {dep} (libraries don't import each other)")
            elif top == pkg and _layer(mod) == "reference" and _layer(dep) in ("host", "ascend", "table"):
                bad.append(f"{mod} -> {dep} (the reference imports no optimised path and no table)")
            elif top == pkg and {_layer(mod), _layer(dep)} == {"host", "ascend"}:
                bad.append(f"{mod} -> {dep} (host/ and ascend/ never import each other)")
    assert not bad, "layering broken:\n" + "\n".join(sorted(bad))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted. A submodule
    importing a name its package's ``__init__`` defines (``from . import __version__``) closes a circle
    with the ``__init__`` importing that submodule, and counts."""
    edges = {m: {d for d in ds if d in graph and d != m} for m, ds in graph.items()}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("pkg", list(PACKAGES))
def test_no_import_circles(pkg):
    cycles = _cycles(_graph(pkg))
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_see_a_planted_circle_and_a_layer_break():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": set()}
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert _layer("p.reference.sparse") == "reference" and _layer("p._dispatch") == "table"
    assert _layer("p.host") == "host" and _layer("p.ascend.x") == "ascend" and _layer("p.kv_cache") is None
