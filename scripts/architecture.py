"""Draw docs/reference/architecture.md's layout section from the code, so the page cannot drift from it.

    python scripts/architecture.py            # rewrite the section between the page's two markers
    python scripts/architecture.py --check    # exit 1 (with a diff) when the committed page differs

The section lists each package of src/prbench (its `__init__` docstring's first sentence, its modules and
their floor), and every registry with what `prbench/registry.py` registers in it. A module's floor is
1 + the highest floor among the prbench modules it imports, anywhere in it (a function's lazy import
counts): floor 1 imports nothing of prbench. The same walk serves tests/test_structure.py's registration
rule (`upward_references`). The source is read as text (ast), except the registries, which are imported
(their modules import no concrete class).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "prbench"
PAGE = ROOT / "docs" / "reference" / "architecture.md"
BEGIN = "<!-- layout: drawn from the code by scripts/architecture.py; edit the code, then rerun it -->"
END = "<!-- /layout -->"
WIDTH = 110
COLUMN = 18  # where a package's sentence and modules start


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of src/prbench by dotted name (a package is its `__init__`)."""
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(path: Path, module: str, known: set[str]) -> set[str]:
    """Every prbench module `path` imports, at module level or inside a function (lazy imports count too)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for a in node.names:  # `from prbench import metrics` imports the module prbench.stats.metrics
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in out if m == "prbench" or m.startswith("prbench.")}


def module_graph() -> dict[str, set[str]]:
    """Module -> the prbench modules it imports (a package's own `__init__` counts as a module)."""
    files = modules()
    return {m: {t for t in imports(p, m, set(files)) if t != m and t in files} for m, p in files.items()}


def floors(graph: dict[str, set[str]] | None = None) -> dict[str, int]:
    """Module -> its floor: 1 + the highest floor of what it imports (1: it imports no prbench module)."""
    graph = module_graph() if graph is None else graph
    out: dict[str, int] = {}

    def floor(m: str, path: tuple[str, ...]) -> int:
        if m not in out:
            if m in path:
                raise ValueError("import circle: " + " -> ".join([*path[path.index(m):], m]))
            out[m] = 1 + max((floor(t, (*path, m)) for t in graph[m]), default=0)
        return out[m]

    for m in graph:
        floor(m, ())
    return out


REFERENCE = re.compile(r"\b(prbench(?:\.\w+)+):[\w.]+")


def _target_module(dotted: str, known: set[str] | dict[str, Any]) -> str | None:
    """The module a dotted reference lands in: its longest prefix that is a module."""
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def references(path: Path, known: set[str] | dict[str, Any]) -> list[tuple[int, str, str]]:
    """(line, text, module) of each string reference to a prbench module in `path`: a "prbench.x.y:attr" inside
    any string constant, or the argument of `import_module("prbench.x.y")`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for ref in REFERENCE.finditer(node.value):
                target = _target_module(ref[1], known)
                if target:
                    out.append((node.lineno, ref[0], target))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith("prbench.")
              and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"):
            target = _target_module(node.args[0].value, known)
            if target:
                out.append((node.lineno, node.args[0].value, target))
    return out


REGISTRATION_MODULE = "prbench.registry"


def upward_references() -> list[tuple[str, int, str, int, int]]:
    """The registration rule's breaches: a string reference from a module to one on a higher floor, outside
    prbench/registry.py (the one registration module), prbench/__init__.py (the lazy public API) and a
    package `__init__` naming its own submodules. (file, line, reference, its floor, the target's floor) each."""
    files = modules()
    floor = floors()
    out = []
    for module, path in files.items():
        if module in (REGISTRATION_MODULE, "prbench"):
            continue
        own = module + "." if path.name == "__init__.py" else None
        for line, text, target in references(path, files):
            if floor[target] > floor[module] and not (own and target.startswith(own)):
                out.append((path.relative_to(PKG).as_posix(), line, text, floor[module], floor[target]))
    return out


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    return re.split(r"(?<=[.?!])\s+(?=[A-Z`(])", para, maxsplit=1)[0] or "(no docstring)"


def _wrap(text: str, first: str, indent: int) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=" " * indent,
                         break_on_hyphens=False, break_long_words=False)


def _items(items: list[str], indent: int) -> list[str]:
    """`items` comma-separated in lines of at most WIDTH characters, never splitting one."""
    lines = [" " * indent]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > WIDTH and lines[-1].strip():
            lines[-1] = lines[-1].rstrip()
            lines.append(" " * indent)
        lines[-1] += ("" if not lines[-1].strip() else " ") + piece
    return lines


def layout() -> list[str]:
    """Each package: its name, its `__init__`'s first sentence, its modules with their floor, its data folders."""
    files = modules()
    floor = floors()
    packages = sorted((m for m, p in files.items() if p.name == "__init__.py"), key=lambda m: m.split("."))
    lines = []
    for pkg in packages:
        depth = pkg.count(".")
        folder = Path(files[pkg]).parent
        name = "src/prbench/" if pkg == "prbench" else folder.name + "/"
        head = " " * (2 * depth) + name
        head = head.ljust(COLUMN) if len(head) < COLUMN else head + " "
        lines += _wrap(first_sentence(files[pkg]), head, COLUMN)
        own = sorted(m for m in files if m.rpartition(".")[0] == pkg and files[m].name != "__init__.py")
        lines += _items([f"__init__ {floor[pkg]}"] + [f"{m.rpartition('.')[2]} {floor[m]}" for m in own], COLUMN)
        data = sorted(d.name + "/" for d in folder.iterdir()  # folders of files only (a fresh clone has them)
                      if d.is_dir() and d.name != "__pycache__" and not (d / "__init__.py").exists()
                      and any(f.is_file() and "__pycache__" not in f.parts for f in d.rglob("*")))
        if data:
            lines += _wrap("data folders: " + ", ".join(data), " " * COLUMN, COLUMN)
    return lines


def _import(module: str) -> Any:
    """`module` from this checkout's src/ (not another prbench installed in the environment)."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    loaded = importlib.import_module(module)
    if not Path(loaded.__file__ or "").is_relative_to(SRC):
        raise SystemExit(f"{module} was imported from {loaded.__file__}, not from {SRC}: run with PYTHONPATH={SRC}")
    return loaded


def registries() -> list[tuple[str, str, Any]]:
    """(module, name, registry) of every module-level `X = ...Registry(...)` in src/prbench, imported."""
    found = []
    for module, path in modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id.endswith("Registry")):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.append((module, target.id, getattr(_import(module), target.id)))
    return sorted(found, key=lambda f: (f[0] != REGISTRATION_MODULE, f[0], f[1]))


def registry_lines() -> list[str]:
    """Each registry: where it is, its entry-point group, and the built-ins prbench/registry.py lists for it."""
    registry = _import(REGISTRATION_MODULE)
    lines = []
    for module, name, reg in registries():
        listed = next((f"{REGISTRATION_MODULE}.{k}" for k, v in vars(registry).items()
                       if v is reg.builtins and module != REGISTRATION_MODULE), None)
        head = f"{name} ({module}): {reg.kind}s; plug-ins: the {reg.group} entry points"
        lines += _wrap(head + (f"; built-ins: {listed}" if listed else ""), "", 4)
        width = max((len(k) for k in reg.builtins), default=0)
        lines += [f"  {k.ljust(width)}  {v}" for k, v in reg.builtins.items()]
    return lines


def section() -> str:
    graph = module_graph()
    top = max(floors(graph).values())
    return "\n".join([
        BEGIN,
        "",
        f"Packages of `src/prbench` (what each `__init__` says it owns), their modules and floors (1 to {top}):",
        "",
        "```text", *layout(), "```",
        "",
        "Registries, and the built-ins `src/prbench/registry.py` lists in each (`name` -> `module:attr`):",
        "",
        "```text", *registry_lines(), "```",
        "",
        END,
    ])


def render(page: str) -> str:
    """`page` with its layout section drawn again from the code."""
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{PAGE}: no layout markers ({BEGIN} ... {END})")
    head, _, rest = page.partition(BEGIN)
    return head + section() + rest.partition(END)[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed page differs from the code")
    args = ap.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    drawn = render(page)
    if args.check:
        if drawn != page:
            sys.stdout.writelines(difflib.unified_diff(page.splitlines(True), drawn.splitlines(True),
                                                       str(PAGE), "drawn from the code"))
            return 1
        return 0
    PAGE.write_text(drawn, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
