"""The package's import graph, function-level imports included, and its cycles; the structure's budgets.

    python scripts/check_imports.py            # prints upward imports, cycles, flat modules, long files, inline defaults
    python scripts/check_imports.py --strict   # exit 1 when any rule or budget of docs/architecture.md is broken

Every `import zcp.x` / `from zcp.x import y` anywhere in a module (top level or inside a function) is an edge
from that module to zcp.x (to zcp.x.y when y is itself a module). The layer order (`LAYER_OF`, low to high:
zcp and zcp.errors, zcp.core, zcp.config, zcp.backends, zcp.benchmarks, zcp.probe, zcp.simulate, zcp.validate):
a module imports only its own layer or lower ones; every edge to a higher layer is printed as
`a -> b (layer i -> j)`, and there is no allow-list. A module outside every layer is reported too. A cycle is a
strongly connected component of more than one module (or a module importing itself). Budgets: no upward import;
no cycle; no flat module in zcp/ but __init__, errors and at most two others; no file over 800 lines; inline
config defaults at most 5, each listed and justified by a `# inline default: <why>` comment on its line or the
line above.

An inline config default is a default written in code for a config value, i.e. a second definition beside the
schema dataclass's field (`inline_defaults` has the exact rule): `cfg.get("x", 3)`, `getattr(cfg, "x", 3)`,
`cfg.get("x") or 3`, `3 if cfg.get("x") is None else ...` and the like, on a config object (a name such as
cfg / c / job / *_cfg, a parameter typed as a config, or a local assigned from one); reads of records, summaries
and other result files are not config and not counted. The fix is to read the validated dataclass
(`validate(cfg, job=...)["__job__"]`, or `zcp.config.schemas.group_config` for one group), where the default is
defined once.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "zcp"
MAX_LINES = 800
MAX_FLAT_EXTRA = 2
MAX_INLINE_DEFAULTS = 5
# the layers, low to high: a module may import its own layer and the lower ones only (the package's own
# __init__ holds paths and the version, nothing else: the lowest layer, with errors)
LAYER_OF = {"zcp": 0, "zcp.errors": 0, "zcp.core": 1, "zcp.config": 2, "zcp.backends": 3, "zcp.benchmarks": 4,
            "zcp.probe": 5, "zcp.simulate": 6, "zcp.validate": 7}


def module_name(path: Path, root: Path | None = None) -> str:
    """The dotted module name of a file under `root` (a package's `__init__.py` names the package)."""
    rel = path.relative_to(root or ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(pkg: Path | None = None) -> dict[str, Path]:
    """Every module of the package folder `pkg` (default: zcp/) by dotted name."""
    pkg = pkg or PKG
    return {module_name(p, pkg.parent): p for p in sorted(pkg.rglob("*.py"))}


def imports_of(path: Path, known: set[str], root: Path | None = None) -> set[str]:
    """zcp modules imported anywhere in `path` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = module_name(path, root)
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


def graph(pkg: Path | None = None) -> dict[str, set[str]]:
    """Module -> the zcp modules it imports, anywhere in its body (function-level imports included)."""
    pkg = pkg or PKG
    mods = modules(pkg)
    known = set(mods)
    return {m: imports_of(p, known, pkg.parent) for m, p in mods.items()}


def layer(module: str) -> int | None:
    """The layer of a module (`LAYER_OF`: its longest listed package prefix, the bare package `zcp` only itself),
    None outside every layer."""
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        hit = LAYER_OF.get(".".join(parts[:k]))
        if hit is not None:
            return hit
    return LAYER_OF.get(module)


def upward_imports(g: dict[str, set[str]]) -> list[tuple[str, str, int, int]]:
    """Every edge a -> b of the graph whose target sits in a higher layer than its source: (a, b, i, j)."""
    out = []
    for a in sorted(g):
        for b in sorted(g[a]):
            i, j = layer(a), layer(b)
            if i is not None and j is not None and j > i:
                out.append((a, b, i, j))
    return out


def unlayered(g: dict[str, set[str]]) -> list[str]:
    """Modules of the graph that belong to no layer (a new top-level package must be placed in `LAYER_OF`)."""
    return sorted(m for m in g if layer(m) is None)


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


# ------------------------------------------------------------------------------------- inline config defaults
# A receiver is a config object when its root name (through attributes, subscripts, `.get(...)`, `x or {}` and the
# converters below) is a config name: one matching CONFIG_NAME, a parameter annotated with a config type, or a local
# name assigned from a config expression in the same function (or an enclosing one).
CONFIG_NAME = re.compile(r"^(cfg|c|conf|config|settings|job|det|mc|.+_cfg|.+_conf|.+_config|.+_settings)$")
CONFIG_TYPE = re.compile(r"\b(DictConfig|\w+Config|\w+Job|\w+Settings)\b")
CONVERTERS = {"to_dict", "plain", "_plain", "to_container", "dict", "asdict", "vars", "model_config", "deepcopy"}
JUSTIFIED = "# inline default:"


def _root(node: ast.AST) -> str | None:
    """The name a config expression hangs from: `cfg` for cfg.data.get("x"), (cfg.get("run") or {}), to_dict(cfg)."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return node.attr  # self.cfg.get(...): the attribute names the object
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.BoolOp):
            node = node.values[0]
        elif isinstance(node, ast.IfExp):
            node = node.body
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "get":
                node = f.value
            elif ((isinstance(f, ast.Name) and f.id in CONVERTERS) or (isinstance(f, ast.Attribute)
                  and f.attr in CONVERTERS)) and node.args:
                node = node.args[0]
            else:
                return None
        else:
            return None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _config_names(fn: ast.AST, inherited: set[str]) -> set[str]:
    """Names bound to config objects in a function: any name matching CONFIG_NAME, parameters annotated with a
    config type, and names assigned from a config expression."""
    names = set(inherited)
    names |= {n.id for n in _own_nodes(fn) if isinstance(n, ast.Name) and CONFIG_NAME.match(n.id)}
    args = fn.args if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else None
    if args is not None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            ann = ast.unparse(a.annotation) if getattr(a, "annotation", None) is not None else ""
            if CONFIG_NAME.match(a.arg) or CONFIG_TYPE.search(ann):
                names.add(a.arg)
    assigns = [n for n in _own_nodes(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))]
    changed = True
    while changed:  # to a fixed point: `d = to_dict(data_cfg)`, then `f = d.get("fields") or {}`
        changed = False
        for n in assigns:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if n.value is None or _root(n.value) not in names:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in names:
                    names.add(t.id)
                    changed = True
    return names


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function (or module) body, nested functions and classes excluded."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        out.append(n)
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))
    return out


def _config_get(node: ast.AST, names: set[str], nargs: int) -> bool:
    """`<config>.get(key)` (nargs=1) / `<config>.get(key, default)` (nargs=2)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and len(node.args) == nargs and _root(node.func.value) in names)


def _config_attr(node: ast.AST, names: set[str]) -> bool:
    """A config attribute (`cfg.data.on_overflow`, `job.stats.alpha`)."""
    return isinstance(node, ast.Attribute) and _root(node) in names


def _schema_default(node: ast.AST) -> bool:
    """A default read from the schema itself (`SimulationJob.seed`, `field_default(ExposureConfig, "k")`): the one
    definition, used where a stored result file (an old run's config) is read raw; not a second default."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return bool(re.fullmatch(r"[A-Z]\w*(Config|Job|Settings)", node.value.id))
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "field_default"


def _restated(node: ast.AST) -> bool:
    """A literal fallback of a config attribute that restates a value ("error", 3, [0.05, 0.01]); an empty
    container ({}, [], ()) only stands for "nothing" where an optional group or mapping is null."""
    empty = isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and not (
        node.keys if isinstance(node, ast.Dict) else node.elts)
    return _literal(node) and not empty


def _literal(node: ast.AST) -> bool:
    """A constant written in code (3, "error", [], {}, [0.05, 0.01]): a restated default, not a derived value."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal(k) and _literal(v) for k, v in zip(node.keys, node.values, strict=True))
    return isinstance(node, ast.UnaryOp) and _literal(node.operand)


def _getters(tree: ast.AST) -> set[str]:
    """Functions of a module that read a config with a default they are given (`def _get(cfg, key, default)` around
    `cfg.get(key, default)` / `getattr(cfg, key, default)`): their call sites with a default count as hits."""
    out = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(fn.args.args) < 3:
            continue
        obj, key, default = (a.arg for a in fn.args.args[:3])
        for n in ast.walk(fn):
            if not isinstance(n, ast.Call):
                continue
            call = ast.unparse(n)
            if call in (f"{obj}.get({key}, {default})", f"getattr({obj}, {key}, {default})"):
                out.add(fn.name)
    return out


def _hits_in(fn: ast.AST, names: set[str], getters: set[str] = frozenset()) -> list[ast.AST]:
    out: list[ast.AST] = []
    for n in _own_nodes(fn):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in getters and len(n.args) == 3
                and not _is_none(n.args[2])):
            out.append(n)  # _get(data_cfg, "format", "items") through a module's getter helper
        elif _config_get(n, names, 2) and not _is_none(n.args[1]) and not _schema_default(n.args[1]):
            out.append(n)  # cfg.get("x", 3)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
              and len(n.args) == 3 and not _is_none(n.args[2]) and _root(n.args[0]) in names):
            out.append(n)  # getattr(cfg, "x", 3)
        elif (isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and not _is_none(n.values[-1])
              and (_config_get(n.values[0], names, 1) or (_config_attr(n.values[0], names) and _restated(n.values[-1])))):
            out.append(n)  # cfg.get("x") or <anything>, cfg.x or 3
        elif isinstance(n, ast.IfExp) and _none_test(n.test) is not None:
            read, is_none = _none_test(n.test)
            fallback = n.body if is_none else n.orelse
            if _config_get(read, names, 1) or (_config_attr(read, names) and _restated(fallback)):
                out.append(n)  # 3 if cfg.get("x") is None else cfg.x
        elif isinstance(n, ast.IfExp) and _config_get(n.test, names, 1) and not _is_none(n.orelse):
            out.append(n)  # cfg.x if cfg.get("x") else 3
        elif isinstance(n, (ast.If,)) and _fallback_if(n, names):
            out.append(n)  # v = cfg.get("x") ... if v is None: v = 3
    return out


def _none_test(t: ast.AST) -> tuple[ast.AST, bool] | None:
    """(x, True) for `x is None`, (x, False) for `x is not None`, else None."""
    if (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.Is, ast.IsNot))
            and _is_none(t.comparators[0])):
        return t.left, isinstance(t.ops[0], ast.Is)
    return None


def _fallback_if(node: ast.If, names: set[str]) -> bool:
    """`if v is None: v = ...` / `if not v: v = ...` where v was assigned a config read (names ⊇ {v} via flow)."""
    t = node.test
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Is) and _is_none(t.comparators[0]):
        var = t.left
    elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
        var = t.operand
    else:
        return False
    if not (isinstance(var, ast.Name) and var.id in names and not CONFIG_NAME.match(var.id)):
        return False
    return any(isinstance(s, ast.Assign) and any(isinstance(x, ast.Name) and x.id == var.id for x in s.targets)
               and _literal(s.value) for s in node.body)


def _scope_hits(scope: ast.AST, inherited: set[str], getters: set[str]) -> list[ast.AST]:
    """Hits in a module, function or class body and, recursively, in its nested scopes (a nested function sees its
    enclosing function's config names; a class body starts afresh)."""
    names = _config_names(scope, inherited)
    hits = _hits_in(scope, names, getters)
    for n in _own_nodes(scope):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            hits += _scope_hits(n, names, getters)
        elif isinstance(n, ast.ClassDef):
            hits += _scope_hits(n, set(), getters)
    return hits


def inline_defaults() -> list[tuple[str, str | None]]:
    """Defaults written in code for config values in zcp/: (`path:line: code`, the justification or None).

    Counted, the default not None: `<config>.get(key, default)`, `getattr(<config>, key, default)`,
    `<config>.get(key) or default`, `default if <config read> is None else ...`, `... if <config>.get(key) else
    default`, `v = <config read>` followed by `if v is None: v = <literal>` (or `if not v:`), and the call sites
    with a default of a module's getter helper (`_getters`: `_get(data_cfg, "format", "items")`).

    <config> is an expression hanging from a config name (`_root`, through attributes, subscripts, `.get`,
    `x or {}` and converters such as to_dict): a name matching CONFIG_NAME (cfg, c, conf, config, settings, job,
    det, mc, *_cfg, *_conf, *_config, *_settings), a parameter annotated with a config type (DictConfig,
    *Config, *Job, *Settings), or a local assigned from a config expression (`d = to_dict(data_cfg)`).

    Not counted: reads of records, summaries, manifests and other result files (summary.get, r.get, row.get);
    a schema's own code (`self.path or "model"` in a dataclass method: the one definition); a default taken
    from the schema (`_schema_default`: `cfg.get("seed", SimulationJob.seed)` on a stored run config); and, on
    attributes of a validated config, a fallback that is not a restated literal (`_restated`): one derived from
    other values (`api.model or path`, "null: the run's seed") is the schema's documented meaning of null, and
    an empty container stands for "nothing" where an optional group is null.

    A hit whose line (or the line above) carries `# inline default: <why>` is justified; every hit counts
    toward the budget.
    """
    out: list[tuple[str, str | None]] = []
    for p in sorted(PKG.rglob("*.py")):
        out += [(f"{p.relative_to(ROOT)}:{where}", why) for where, why in defaults_in(p.read_text(encoding="utf-8"))]
    return out


def defaults_in(text: str) -> list[tuple[str, str | None]]:
    """The inline config defaults of one module's source: (`line: code`, the justification or None)."""
    lines = text.splitlines()
    tree = ast.parse(text)
    out: list[tuple[str, str | None]] = []
    for n in sorted(_scope_hits(tree, set(), _getters(tree)), key=lambda n: (n.lineno, n.col_offset)):
        near = lines[n.lineno - 1] + "\n" + (lines[n.lineno - 2] if n.lineno >= 2 else "")
        why = near.split(JUSTIFIED, 1)[1].split("\n")[0].strip() if JUSTIFIED in near else None
        out.append((f"{n.lineno}: {ast.unparse(n).splitlines()[0][:140]}", why))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the report; with --strict, 1 when a rule or budget is broken (else 0)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="exit 1 when a rule or budget is broken")
    args = ap.parse_args(argv)
    g = graph()
    up = upward_imports(g)
    loose = unlayered(g)
    cyc = cycles(g)
    flat = flat_modules()
    long = long_files()
    inline = inline_defaults()
    print(f"{len(g)} modules, {sum(len(v) for v in g.values())} import edges (function-level imports included)")
    print(f"upward imports (a module importing a higher layer than its own): {len(up)}")
    for a, b, i, j in up:
        print(f"  {a} -> {b} (layer {i} -> {j})")
    if loose:
        print(f"modules outside every layer: {loose}")
    print(f"cycles: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
    print(f"flat modules besides __init__/errors: {len(flat)} {flat}")
    print(f"files over {MAX_LINES} lines: {len(long)} {long}")
    print(f"inline config defaults: {len(inline)} (budget {MAX_INLINE_DEFAULTS})")
    for line, why in inline:
        print(f"  {line}" + (f"  -- {why}" if why else "  -- NOT JUSTIFIED"))
    bad = bool(up) or bool(loose) or bool(cyc) or len(flat) > MAX_FLAT_EXTRA or bool(long) or len(inline) > MAX_INLINE_DEFAULTS or any(why is None for _, why in inline)
    return 1 if (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
