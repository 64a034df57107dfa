"""Refresh src/prbench/testing/vllm/vllm-<version>.json from the real vLLM wheels (read, never installed).

Why: the vLLM engine and its stand-in (`prbench.testing.fake_vllm`) must accept exactly the
keywords real vLLM accepts. This script reads the wheel's source with `ast` (nothing of vLLM
is imported) and stores, per version:

- `engine_args`: the dataclass fields of `vllm.engine.arg_utils.EngineArgs`
  (`LLM(**kwargs)` forwards every unnamed keyword into `EngineArgs(...)`);
- `llm_init`: the named parameters of `vllm.entrypoints.llm.LLM.__init__`;
- `llm_methods`: parameters of `LLM.generate`, `LLM.classify`, `LLM.get_tokenizer`;
- `sampling_params`, `pooling_params`: the struct fields of `SamplingParams` / `PoolingParams`;
- `architectures`: the model registry's tables (which architectures vLLM can classify).

Usage: python scripts/refresh_vllm_fields.py 0.10.1.1 0.33.0 [--wheels /tmp/wheels]
(downloads with `pip download --no-deps vllm==X` when the wheel is not in --wheels/vllm-X/).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "prbench" / "testing" / "vllm"
FILES = {
    "engine_args": ("vllm/engine/arg_utils.py", "EngineArgs"),
    "sampling_params": ("vllm/sampling_params.py", "SamplingParams"),
    "pooling_params": ("vllm/pooling_params.py", "PoolingParams"),
}
METHODS = ("generate", "classify", "get_tokenizer")


def class_node(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SystemExit(f"class {name} not found")


def fields(cls: ast.ClassDef) -> list[str]:
    """Annotated class attributes (dataclass / msgspec fields), ClassVar excluded."""
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            out.append(node.target.id)
    return out


def params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg != "self"]


def method(classes: list[ast.ClassDef], name: str) -> tuple[ast.FunctionDef, str]:
    """`name` on LLM or the first mixin base that defines it (vLLM >= 0.2x moved methods to mixins)."""
    for cls in classes:
        found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if found:
            return found[-1], cls.name  # the implementation after any @overload stubs
    raise SystemExit(f"LLM.{name} not found")


def llm_classes(z: zipfile.ZipFile) -> list[ast.ClassDef]:
    """LLM and its bases, found through the `from vllm.x import Base` lines of llm.py."""
    tree = ast.parse(z.read("vllm/entrypoints/llm.py").decode("utf-8"))
    llm = class_node(tree, "LLM")
    out = [llm]
    sources = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
               for a in n.names}
    for base in llm.bases:
        name = ast.unparse(base)
        module = sources.get(name)
        if module:
            out.append(class_node(ast.parse(z.read(module.replace(".", "/") + ".py").decode("utf-8")), name))
    return out


def registry_architectures(z: zipfile.ZipFile) -> dict[str, list[str]]:
    """Architecture names of vLLM's model registry, per module-level table (`_EMBEDDING_MODELS`, ...)."""
    tree = ast.parse(z.read("vllm/model_executor/models/registry.py").decode("utf-8"))
    out: dict[str, list[str]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id.endswith("_MODELS") and isinstance(value, ast.Dict):
            keys = [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if keys:
                out[target.id] = sorted(keys)
    return out


def wheel_for(version: str, wheels: Path) -> Path:
    folder = wheels / f"vllm-{version}"
    found = sorted(folder.glob("vllm-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}", "-d",
                        str(folder)], check=True)
        found = sorted(folder.glob("vllm-*.whl"))
    return found[0]


def extract(version: str, wheels: Path) -> dict:
    whl = wheel_for(version, wheels)
    with zipfile.ZipFile(whl) as z:
        def tree(path: str) -> ast.Module:
            return ast.parse(z.read(path).decode("utf-8"))

        data: dict = {"version": version, "wheel": whl.name,
                      "source": {k: f"{p}:{c}" for k, (p, c) in FILES.items()}}
        for key, (path, cls) in FILES.items():
            data[key] = sorted(fields(class_node(tree(path), cls)))
        classes = llm_classes(z)
        data["source"]["llm"] = "vllm/entrypoints/llm.py:LLM"
        data["llm_init"] = sorted(params(method(classes, "__init__")[0]))
        data["architectures"] = registry_architectures(z)
        data["source"]["architectures"] = "vllm/model_executor/models/registry.py"
        data["llm_methods"] = {}
        for m in METHODS:
            fn, owner = method(classes, m)
            data["llm_methods"][m] = params(fn)
            data["source"][f"LLM.{m}"] = owner
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="+")
    ap.add_argument("--wheels", type=Path, default=Path("/tmp/wheels"))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for v in args.versions:
        data = extract(v, args.wheels)
        path = OUT / f"vllm-{v}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{path}: {len(data['engine_args'])} EngineArgs fields, {len(data['sampling_params'])} "
              f"SamplingParams, {len(data['pooling_params'])} PoolingParams")


if __name__ == "__main__":
    main()
