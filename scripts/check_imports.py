"""The package's import graph, function-level imports included, and its cycles; the structure's budgets.

    python scripts/check_imports.py            # prints cycles, flat modules, long files, inline config defaults
    python scripts/check_imports.py --strict   # exit 1 when any budget of docs/architecture.md is exceeded

Every `import zcp.x` / `from zcp.x import y` anywhere in a module (top level or inside a function) is an edge
from that module to zcp.x (to zcp.x.y when y is itself a module). A cycle is a strongly connected component of
more than one module (or a module importing itself). Budgets: no cycle; no flat module in zcp/ but __init__,
errors and at most two others; no file over 800 lines; inline config defaults (`.get("key", default)` on
config objects: counted as `.get(` calls with a second argument in zcp/) at most 5, each listed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "zcp"
MAX_LINES = 800
MAX_FLAT_EXTRA = 2
MAX_INLINE_DEFAULTS = 5


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """zcp modules imported anywhere in `path` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "zcp":
                    out.add(_resolve(a.name, known))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "zcp":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else _resolve(base, known))
    out.discard(me)
    return {m for m in out if m}


def _resolve(name: str, known: set[str]) -> str:
    while name and name not in known:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(p, known) for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), importing a package's __init__ from
    one of its own submodules excluded (a submodule may import its package's public names)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def edges(v: str) -> set[str]:
        return {w for w in g.get(v, ()) if not v.startswith(w + ".")}

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                strong(w)
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

    sys.setrecursionlimit(10_000)
    for v in g:
        if v not in index:
            strong(v)
    return out


def flat_modules() -> list[str]:
    return sorted(p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "errors.py"))


def long_files() -> list[tuple[str, int]]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        n = sum(1 for _ in p.open(encoding="utf-8"))
        if n > MAX_LINES:
            out.append((str(p.relative_to(ROOT)), n))
    return out


def inline_defaults() -> list[str]:
    """`.get(<key>, <default>)` calls with a non-None default in zcp/ (config reads with a default in code)."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and not (isinstance(node.args[1], ast.Constant) and node.args[1].value is None)):
                out.append(f"{p.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="exit 1 when a budget is exceeded")
    args = ap.parse_args()
    g = graph()
    cyc = cycles(g)
    flat = flat_modules()
    long = long_files()
    inline = inline_defaults()
    print(f"{len(g)} modules, {sum(len(v) for v in g.values())} import edges (function-level imports included)")
    print(f"cycles: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
    print(f"flat modules besides __init__/errors: {len(flat)} {flat}")
    print(f"files over {MAX_LINES} lines: {len(long)} {long}")
    print(f"inline .get defaults: {len(inline)}")
    for line in inline:
        print("  " + line)
    bad = bool(cyc) or len(flat) > MAX_FLAT_EXTRA or bool(long) or len(inline) > MAX_INLINE_DEFAULTS
    return 1 if (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
