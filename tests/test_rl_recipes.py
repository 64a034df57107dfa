"""The docs' verl and OpenRLHF recipes, checked by the frameworks' own code (pinned releases).

- verl 0.9.1: `verl.trainer.main_ppo.main` first runs `verl.utils.config.validate_config(config,
  need_reference_policy(config), need_critic(config))` on the hydra config composed from
  `verl/trainer/config/ppo_trainer.yaml` plus the command's overrides. The test composes the
  docs' command (docs/rl.md) and docs/verl_prbench.yaml the same way and runs that function.
- OpenRLHF 0.11.2: `openrlhf/cli/train_ppo_ray.py` builds its argparse parser and checks the
  parsed arguments in its `if __name__ == "__main__":` block, then calls `train(args)`, which
  needs GPUs. The test runs that block's own statements (taken from the installed file with
  `ast`, every statement but the final `train(args)`) on the docs' command lines.

The releases are installed with `--no-deps` (plus only what these modules import, pinned in
tests/recipe_frameworks.txt) into a folder of their own and used in a subprocess, so they never
mix with the test venv. The commands are read from the docs, so docs and tests cannot drift.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "tests" / "recipe_frameworks.txt"


@pytest.fixture(scope="module")
def frameworks() -> Path:
    """verl + OpenRLHF wheels in `<venv>/recipe-frameworks` (make test puts them there; else installed now)."""
    target = Path(sys.prefix) / "recipe-frameworks"
    stamp = target / ".requirements-sha256"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.is_file() or stamp.read_text() != digest:
        res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target",
                              str(target), "-r", str(REQUIREMENTS)], check=False, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        stamp.write_text(digest)
    return target


def _run(frameworks: Path, script: str, payload: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(frameworks), str(ROOT / "src")]), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-c", script, json.dumps(payload)], check=False, capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def doc_commands(marker: str) -> list[list[str]]:
    """Each shell command in docs/rl.md that runs `marker`, as argv after it (continuations joined)."""
    text = (ROOT / "docs" / "rl.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for cmd in block.replace("\\\n", " ").splitlines():
            if marker in cmd:
                words = shlex.split(cmd, comments=True)
                out.append(words[words.index(marker) + 1:])
    assert out, f"no {marker} command in docs/rl.md"
    return out


VERL_CHECK = r"""
import json, sys
from hydra import compose, initialize_config_dir
import verl
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

p = json.loads(sys.argv[1])
out = {"version": verl.__version__}
for name, (config_dir, config_name, overrides) in p.items():
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name=config_name, overrides=overrides)
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        out[name] = "ok"
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@pytest.mark.slow
def test_docs_verl_command_and_yaml_pass_verls_validate_config(frameworks, tmp_path) -> None:
    from prbench.testing.tiny import make_tiny_causal_lm

    policy = str(make_tiny_causal_lm(tmp_path / "policy", seed=0))  # verl reads the model's config: a real folder
    [argv] = doc_commands("verl.trainer.main_ppo")
    overrides = [a.replace("models/policy", policy).replace("$REWARD_FILE", "/x/verl.py") for a in argv]
    verl_config = str(Path(frameworks) / "verl" / "trainer" / "config")
    unset = [a for a in overrides if "actor.ppo_micro_batch_size_per_gpu" not in a]
    small = [a if not a.startswith("data.train_batch_size=") else "data.train_batch_size=32" for a in overrides]
    res = _run(frameworks, VERL_CHECK, {
        "docs_command": (verl_config, "ppo_trainer", overrides),
        "docs_yaml": (str(ROOT / "docs"), "verl_prbench", [f"actor_rollout_ref.model.path={policy}",
                                                            f"critic.model.path={policy}"]),
        # the same check refuses what the issue found in the old recipe: it is not vacuous
        "no_micro_batch": (verl_config, "ppo_trainer", unset),
        "batch_below_mini_batch": (verl_config, "ppo_trainer", small),
    })
    assert res["version"] == "0.9.1"
    assert res["docs_command"] == "ok" and res["docs_yaml"] == "ok"
    assert "ppo_micro_batch_size" in res["no_micro_batch"]
    assert "train_batch_size (32) must be >= actor.ppo_mini_batch_size (64)" in res["batch_below_mini_batch"]


def test_docs_openrlhf_commands_parse_with_openrlhfs_own_parser(frameworks) -> None:
    commands = doc_commands("openrlhf.cli.train_ppo_ray")
    assert len(commands) == 2  # the remote reward server and the local reward function
    parsed = _run(frameworks, OPENRLHF_PARSE, [*commands, [*commands[0], "--reward.remote_rm_url", "x"]])
    assert parsed[0] == {"remote_url": ["http://127.0.0.1:5000/get_reward"], "actor": "models/policy",
                         "label_key": "label", "chat_template": True}
    assert parsed[1]["remote_url"][0].startswith("$(python -c") and parsed[1]["label_key"] == "label"
    assert parsed[2] == {"error": "argparse exit 2"}  # an option OpenRLHF 0.11.2 does not have is refused


OPENRLHF_PARSE = r"""
import ast, importlib.metadata, importlib.util, json, sys
from pathlib import Path

root = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0])
spec = importlib.util.spec_from_file_location("openrlhf.utils.config", root / "utils" / "config.py")
hier = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hier)  # stdlib only; openrlhf/utils/__init__ would pull deepspeed
sys.modules["openrlhf.utils.config"] = hier
tree = ast.parse((root / "cli" / "train_ppo_ray.py").read_text())
main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
assert ast.unparse(main.body[-1]) == "train(args)", ast.unparse(main.body[-1])
stdlib = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
          and all((a.name if isinstance(n, ast.Import) else n.module).split(".")[0] in sys.stdlib_module_names
                  for a in n.names)]
code = compile(ast.Module(body=stdlib + main.body[:-1], type_ignores=[]), str(root / "cli" / "train_ppo_ray.py"), "exec")
assert importlib.metadata.version("openrlhf") == "0.11.2"
out = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["train_ppo_ray.py", *argv]
    ns = {"__name__": "__main__"}
    try:
        exec(code, ns)
    except SystemExit as exc:
        out.append({"error": f"argparse exit {exc.code}"})
        continue
    except AssertionError as exc:
        out.append({"error": f"AssertionError: {exc}"})
        continue
    a = ns["args"]
    out.append({"remote_url": a.reward.remote_url, "actor": a.actor.model_name_or_path,
                "label_key": a.data.label_key, "chat_template": a.data.apply_chat_template})
print(json.dumps(out))
"""
