"""Measures of the source tree's shape anyone can re-run: no package-level import cycle, short functions.

Both read the source as text (ast), so they hold for every module whether or not its extras are installed.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "prbench"


def _script(name: str):
    """A module of scripts/ (not a package): the architecture page's generator holds the import walk."""
    spec = importlib.util.spec_from_file_location(name, SRC.parent / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


architecture = _script("architecture")
_module_name = architecture.module_name


def _unit(module: str) -> str:
    """The node a module counts for: a subpackage (`prbench.data`), a top-level module, or the root package; a
    module of a capability (`prbench.capabilities.eval.kind`) counts alone: a capability's parts sit on the floors
    they serve (its settings under the driver, its command over the CLI's options)."""
    if module.startswith("prbench.capabilities."):
        return module
    return ".".join(module.split(".")[:2])


_imports = architecture.imports


def package_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        for target in _imports(path, module, set(files)):
            a, b = _unit(module), _unit(target)
            if a != b:
                graph.setdefault(a, set()).add(b)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_package_level_import_cycle():
    """A subpackage or top-level module never imports, even lazily inside a function, one that imports it back."""
    found = cycles(package_graph())
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(package_graph()[a]) if b in c)
              for c in found]
    assert found == [], "\n".join(detail)


def test_the_walk_sees_lazy_imports_and_cycles():
    """The measure itself: a function-level import is an edge, and a two-node loop is a cycle."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    graph = package_graph()
    assert "prbench.rewards" in graph["prbench.cli"]  # cli imports rewards only inside its commands


def test_fake_vllm_reads_package_data_that_a_wheel_ships():
    """`prbench.testing` is used by others' tests too: its field lists live in the package, not in tests/."""
    import fnmatch

    import tomllib

    from prbench.testing import fake_vllm

    files = sorted(fake_vllm.DATA.glob("vllm-*.json"))
    assert files and all(PKG in f.parents for f in files)
    shipped = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["prbench"]
    assert all(any(fnmatch.fnmatch(str(f.relative_to(PKG)), g) for g in shipped) for f in files)
    assert set(fake_vllm.VERSIONS) <= {f.stem.removeprefix("vllm-") for f in files}


MAX_LINES = 80
# Functions still longer, each with why and the length it may not grow past. The list is kept true: an entry
# whose function is gone or has been brought under the limit fails the test below, so it is struck then.
LONG_FUNCTIONS = {
    "capabilities/rl/driver.py:train_rl": (173, "GRPO set-up, training and held-out grading; reworked for multi-rank in #27"),
    "capabilities/policy_accuracy/driver.py:policy_accuracy": (97, "becomes an ordinary run kind in #28's read side"),
}


def long_functions() -> dict[str, int]:
    out = {}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    out[f"{path.relative_to(PKG).as_posix()}:{node.name}"] = n
    return out


def test_no_function_over_80_lines_outside_tests():
    """Long functions hide several jobs; the few exceptions are named above with their reason and a cap."""
    found = long_functions()
    new = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    grown = {k: v for k, v in found.items() if k in LONG_FUNCTIONS and v > LONG_FUNCTIONS[k][0]}
    stale = sorted(set(LONG_FUNCTIONS) - set(found))
    assert new == {} and grown == {}, f"over {MAX_LINES} lines: {new}; grown past their cap: {grown}"
    assert stale == [], f"allowed but no longer over {MAX_LINES} lines (or gone): strike {stale} from LONG_FUNCTIONS"
    assert len(LONG_FUNCTIONS) <= 6  # a short list: shorten a function rather than add to it


module_graph = architecture.module_graph


def test_no_module_level_import_circle():
    """Inside a package too, no module imports (even lazily) one that imports it back: the engines circle
    (openai_engine -> batch -> anthropic_engine -> openai_engine) was the last; it is cut and stays cut."""
    found = cycles(module_graph())
    assert found == [], found
    assert cycles({"x.a": {"x.b"}, "x.b": {"x.c"}, "x.c": {"x.a"}}) == [["x.a", "x.b", "x.c"]]


def test_no_string_reference_to_a_higher_floor_outside_the_registration_module():
    """The registration rule (#49): a module's floor is 1 + the highest floor of the prbench modules it imports
    (anywhere in it); a "prbench.x.y:attr" string (or `import_module("prbench.x.y")`) may point up only from
    prbench/registry.py, the one registration module (prbench/__init__.py's lazy public API and a package
    `__init__` naming its own submodules excepted). Elsewhere a lower floor would depend on a higher one."""
    found = [f"{file}:{line}: {ref} (floor {a} -> {b})" for file, line, ref, a, b in architecture.upward_references()]
    assert found == [], "a string reference to a higher floor: list it in prbench/registry.py, or import it:\n" + \
        "\n".join(found)


def test_the_floor_walk_counts_lazy_imports_and_catches_a_string_pointing_up(tmp_path):
    """The measure itself: floors stack; a lazy import counts; a target string and an import_module argument are
    references; a package `__init__` importing its submodule sits above it."""
    assert architecture.floors({"a": set(), "b": {"a"}, "c": {"a", "b"}}) == {"a": 1, "b": 2, "c": 3}
    floor = architecture.floors()
    assert floor["prbench.errors"] == 1 and floor["prbench.registry"] == 2
    assert floor["prbench.cli.train"] > floor["prbench.train.methods"]  # cli/train imports methods in functions
    assert floor["prbench.train.lore"] > floor["prbench.train.methods"]  # lore's METHOD is a Method
    code = 'import importlib\nX = "prbench.cli.eval:eval_cmd"\nY = importlib.import_module("prbench.study.stages")\n'
    (tmp_path / "m.py").write_text(code, encoding="utf-8")
    refs = architecture.references(tmp_path / "m.py", {"prbench.cli.eval", "prbench.study.stages"})
    assert refs == [(2, "prbench.cli.eval:eval_cmd", "prbench.cli.eval"),
                    (3, "prbench.study.stages", "prbench.study.stages")]


BOTTOM_FLOOR = ("prbench.errors", "prbench.registry")  # import nothing of prbench but errors: never a cycle
# Files another open change is rewriting now; the entry goes when that lands (issue 40).
LAZY_FLOOR_ALLOWED = {"rewards/classifier.py"}


def test_no_function_level_import_of_a_bottom_floor_module():
    """A bottom-floor module is imported at the top: hiding it in a function hides nothing and costs a lookup."""
    found = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{rel}:{s.lineno} {s.module}" for s in ast.walk(node)
                          if isinstance(s, ast.ImportFrom) and not s.level and s.module in BOTTOM_FLOOR
                          and rel not in LAZY_FLOOR_ALLOWED]
    assert found == []


MYPY_DEBT_CAP = 0  # modules excused from the type checker (`ignore_errors` in pyproject.toml): none, and none to add
STRICT_CORE = ("prbench.evaluation.evaluate", "prbench.store.records", "prbench.runkinds.*", "prbench.study.*", "prbench.meta.*",
               "prbench.report.*", "prbench.leaderboard", "prbench.eee", "prbench.cli.*")


def test_the_type_checker_is_strict_on_the_core_and_its_debt_only_shrinks():
    import tomllib

    cfg = tomllib.loads((SRC.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = [o for o in cfg["overrides"] if o.get("disallow_untyped_defs")]
    debt = [m for o in cfg["overrides"] if o.get("ignore_errors") for m in o["module"]]
    assert len(strict) == 1 and set(STRICT_CORE) <= set(strict[0]["module"])
    assert len(debt) <= MYPY_DEBT_CAP, f"{len(debt)} modules excused from mypy: fix one rather than add one"
    assert cfg["files"] == ["src/prbench"]
    assert cfg.get("check_untyped_defs") is True  # untyped bodies are checked in every module too


TYPE_IGNORE_CAP = 15  # issue #49: each a place where the type cannot be written (a base chosen at run time ...)


def test_few_type_ignores_and_each_says_why():
    """A `# type: ignore` names its error code and is followed by a comment saying why; at most TYPE_IGNORE_CAP."""
    found, unexplained = [], []
    for path in PKG.rglob("*.py"):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "type: ignore" in line:
                where = f"{path.relative_to(PKG).as_posix()}:{n}"
                found.append(where)
                if not re.search(r"type: ignore\[[a-z,-]+\] +# \S", line):
                    unexplained.append(where)
    assert unexplained == [], f"say why after each of these (`# type: ignore[code]  # why`): {unexplained}"
    assert len(found) <= TYPE_IGNORE_CAP, f"{len(found)} type: ignore in src/prbench: type the code instead ({found})"


def test_the_architecture_page_is_drawn_from_the_code():
    """docs/reference/architecture.md's layout section is what scripts/architecture.py draws from the code now."""
    import difflib

    page = architecture.PAGE.read_text(encoding="utf-8")
    drawn = architecture.render(page)
    diff = "".join(list(difflib.unified_diff(page.splitlines(True), drawn.splitlines(True), "committed", "drawn"))[:60])
    assert drawn == page, ("docs/reference/architecture.md's layout differs from the code: run "
                           f"`python scripts/architecture.py` and commit the page\n{diff}")
# -- issue #49 item 2: typed end to end -----------------------------------------------------------------------
# A string-key read (`x.get("k")`, and `x["k"]` on a `.summary` / `.records` / `.outputs` / `.protocol` attribute)
# over what prbench itself writes (a summary, a record, a meta result, a leaderboard row, a protocol, a study
# output) is a misspelt field read as None: readers use the typed models (prbench.store.records, the run kinds'
# models, `Run.items`, `Run.names`, `RunKind.values`). What the rule matches: the receiver's last name says what it
# is (`summary`, `s`, `rec`, `r`, `row`, `res`, `meta`, `protocol`, `outputs`, `ds`, `run`, ...).
RESULT_NAME = re.compile(r"^(summary|summaries|summ|s|sm|record|records|rec|recs|r|row|rows|res|result|results|meta|"
                         r"protocol|outputs|ds|run|runs|previous|stored|card|metrics|m)$")
RESULT_ATTR = {"summary", "outputs", "protocol", "written"}  # attributes holding one (`res.summary["k"]`)
# Modules that read what prbench does not write, where a dict is the format (each group says why).
EXTERNAL = (
    "formats/",  # benchmark files in their upstream layouts (JSON/JSONL/parquet rows)
    "data/",  # raw data set rows before they are `Example`s (personalize, dsp personas, loaders)
    "engines/",  # provider replies (OpenAI, Anthropic, batch files) and their JSONL batch rows
    "serve/",  # HTTP request payloads of the reward server
    "testing/",  # the stand-in provider servers: they parse requests as the providers do
    "rewards/",  # model folders' config.json and judges' provider replies
    "train/synthesizeme.py",  # the generator model's JSON replies
    "cost.py",  # the shipped and user price tables (a config file)
    "viewer/chromium.py",  # the browser's DevTools protocol replies
    "cli/train.py",  # the trainers' log rows (TRL's log_history) and a model folder's prbench_rm.json
    "config.py",  # JSON Schema / user config parsing
    "study/config.py",
)
# Modules that compute the written shape itself: they count over records as examples.jsonl holds them (the
# summary is made from them before any model exists; readers then validate it), so the keys are the format.
WRITTEN_SHAPE = (
    "evaluation/evaluate.py",  # `summarize` over the records it writes; `previous` is summary.json being extended
    "evaluation/scoring.py",  # builds the records
    "evaluation/validity.py",  # the card from both runs' written records, put into the summaries it (re)writes
    "stats/metrics.py",  # `collapse_items`, item rules over written rows (`written_rows` for typed records)
    "stats/power.py",  # pilot designs over written rows
    "evaluation/sequential.py",  # intervals over written rows; `record_outcome` extends summary.json
    "stats/seqsim.py",  # its own simulation table rows
    "store/records.py",  # `typed_summary` / `legacy_kind`: the one reader of a raw summary (format 0 upgrade)
    "store/runs.py",  # examples.jsonl ids while writing
    "downstream/",  # drivers building the records and summary they write, and the capabilities' drivers:
    "capabilities/bon/driver.py", "capabilities/rl/driver.py", "capabilities/rgd/driver.py",
    "capabilities/policy_accuracy/driver.py", "capabilities/icl/driver.py",
    "train/protocol.py",  # `user_breakdown`: the per-person block `summarize` puts into the summary it writes
    "study/personalize.py",  # the comparison rows it writes to comparison.json
    "build/",  # the build pipeline: its records and report.json made from generator and validator replies
)


def string_key_reads(source: str) -> list[tuple[int, str]]:
    """(line, `receiver[key]`) of each string-key read over something named like a result prbench writes."""
    out = []
    for node in ast.walk(ast.parse(source)):
        recv = key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            recv, key = node.func.value, node.args[0].value
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant)
              and isinstance(node.slice.value, str) and isinstance(node.value, ast.Attribute)
              and node.value.attr in RESULT_ATTR):
            recv, key = node.value, node.slice.value
        if recv is None:
            continue
        inner = recv
        while isinstance(inner, (ast.Call, ast.Subscript)):  # `x.summary_as(M)["k"]`, `rows[0].get("k")`
            inner = inner.func if isinstance(inner, ast.Call) else inner.value
        last = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else ""
        if RESULT_NAME.match(last) or last in RESULT_ATTR or last == "records":
            out.append((node.lineno, f"{ast.unparse(recv)}[{key!r}]"))
    return out


def test_no_string_key_reads_over_results_prbench_writes():
    excused = (*EXTERNAL, *WRITTEN_SHAPE)
    found = [f"{rel}:{line}: {what}" for path in sorted(PKG.rglob("*.py"))
             if not (rel := path.relative_to(PKG).as_posix()).startswith(excused)
             for line, what in string_key_reads(path.read_text(encoding="utf-8"))]
    assert found == [], "read the typed model's attribute instead:\n" + "\n".join(found)


def test_the_string_key_rule_finds_what_it_forbids():
    """The rule itself, on the shapes it must catch (so the test above can fail) and one it must let pass."""
    bad = ("def f(run, res, s, rows, ctx, cfg):\n"
           "    a = run.get('condition')\n"  # the removed Run.get
           "    b = res.summary['metrics']\n"
           "    c = s.get('accuracy')\n"
           "    d = rows[0].get('model')\n"
           "    e = ctx.outputs['eval']\n"
           "    g = [r.get('credit') for r in res.records]\n"
           "    ok = cfg.get('data')\n")  # a config file's object: not a result
    assert [line for line, _ in string_key_reads(bad)] == [2, 3, 4, 5, 6, 7]
