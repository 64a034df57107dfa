"""What a registered kind knows about its spec string, read without loading any model.

A spec is `prefix:rest`; the prefix names a kind in a registry (`prbench.registry`). The kind,
not its callers, knows what `rest` means and which options it takes, so nothing outside a kind
tests a prefix. A kind declares, on its factory (a function attribute or a class attribute, so a
plug-in declares them the same way):

- `options_model`: a `KindOptions` subclass, or a function `rest -> KindOptions subclass` (a
  judge's options depend on its engine). Its fields are the kind's options, one name and type
  each, for the API, `-M key=value` on the command line and a study's `options:`. A kind that
  declares none takes any option (its own constructor checks them).
- `resolve_spec(rest, root) -> rest`: names checked and local paths made absolute against
  `root` (a study config's folder), before anything runs.
- `model_class(rest, **options) -> class`: the class it would build, for `capabilities`.
- `run_name(rest, **options) -> str`: the run's model name without building it (optional).

A kind built by a function declares them through `Kind` (typed attributes, so mypy checks them);
a class declares them as class attributes.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from prbench.errors import SpecError
from prbench.registry import ENGINES

T = TypeVar("T")


class Kind(Generic[T]):
    """A registered kind built by a function, with what it declares about its specs (see the module docstring).

    Calling it builds (`build(rest, **options)`); its name, docstring and signature are the function's.
    Why a class rather than attributes set on the function: the declarations are typed and checked,
    and a misspelt one is an error instead of an attribute nobody reads.
    """

    def __init__(self, build: Callable[..., T], *,
                 options_model: type[KindOptions] | Callable[[str], type[KindOptions]] | None = None,
                 resolve_spec: Callable[[str, Path], str] | None = None,
                 model_class: Callable[..., Any] | None = None,
                 run_name: Callable[..., str] | None = None) -> None:
        functools.update_wrapper(self, build)
        self.build = build
        self.options_model = options_model
        self.resolve_spec = resolve_spec
        self.model_class = model_class
        self.run_name = run_name

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        return self.build(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Kind({getattr(self.build, '__qualname__', self.build)!r})"


class KindOptions(BaseModel):
    """A kind's options: an unknown one is refused naming the closest known one."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class OpenOptions(KindOptions):
    """Options a kind passes on unchecked (to vLLM's own engine arguments, say): its known ones still typed."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)


class RMOptions(KindOptions):
    """What the evaluator hands every reward model."""

    batch_size: int | None = None
    seed: int = 0


# Flags a command hands every model it loads (`--device`, `--mode`, ...): a kind that has no such
# option does not get it, where any other unknown option is an error.
COMMAND_WIDE = frozenset({"device", "dtype", "base_url", "api_key_env", "max_length", "mode", "trust_remote_code",
                          "provider", "rpm", "tpm", "no_api_key"})


def combine(*models: type[KindOptions]) -> type[KindOptions]:
    """One options model with the fields of all (a judge's own options and its engine's)."""
    name = "+".join(m.__name__ for m in models)
    # pydantic's create_model overloads type one base class, not a tuple built at run time
    return create_model(name, __base__=tuple(dict.fromkeys(models)))  # type: ignore[call-overload]  # see above


def _factory(registry: Any, spec: str) -> tuple[Any, str, str]:
    prefix, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise SpecError(f"{registry.kind} spec {spec!r} needs a prefix and a target "
                        f"(known prefixes: {', '.join(registry.names())})")
    return registry.get(prefix), prefix, rest


def _options_model(factory: Any, rest: str) -> type[KindOptions] | None:
    model = getattr(factory, "options_model", None)
    if model is None or (isinstance(model, type) and issubclass(model, KindOptions)):
        return model
    return model(rest)


def options_model(registry: Any, spec: str) -> type[KindOptions] | None:
    """The options model the kind of `spec` declares (None: it takes any option)."""
    factory, _, rest = _factory(registry, spec)
    return _options_model(factory, rest)


@dataclass(frozen=True)
class ModelSpec:
    """A spec parsed once (`parse_spec`): its kind's factory, its text, and the options model the kind declares.

    What a command resolves up front (`prbench.preflight.model_specs`) and hands on: checking the options, naming
    the run and building the model read these, so the spec is not parsed and its kind not looked up again."""

    spec: str
    """The text: with `root`, its one identity (names checked, a local folder absolute, or relative under root)."""
    prefix: str
    rest: str
    factory: Any

    @functools.cached_property
    def options_model(self) -> type[KindOptions] | None:
        """The options model the kind declares for this spec (None: it takes any option); read when first asked."""
        return _options_model(self.factory, self.rest)

    def __str__(self) -> str:
        return self.spec


def parse_spec(registry: Any, spec: str, root: Path | None = None) -> ModelSpec:
    """`spec` parsed: its kind found in `registry`; with `root`, its names checked and local paths resolved there
    by the kind (`resolve_spec`), a folder under `root` keeping its short relative name."""
    factory, prefix, rest = _factory(registry, spec)
    hook = getattr(factory, "resolve_spec", None)
    if root is not None:
        rest = (rest if hook is None else hook(rest, root)).removeprefix(str(root) + os.sep)
    return ModelSpec(f"{prefix}:{rest}", prefix, rest, factory)


def declared(model: type[KindOptions] | None) -> set[str] | None:
    """The option names a model declares; None when it takes any."""
    if model is None or model.model_config.get("extra") == "allow":
        return None
    return set(model.model_fields)


def check_options(registry: Any, spec: str | ModelSpec, options: dict[str, Any], *,
                  command_wide: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`options` validated by the kind's model: typed, unknown ones refused with the closest known one.

    Keys in `command_wide` that the kind does not declare are dropped, not refused.
    """
    model = spec.options_model if isinstance(spec, ModelSpec) else options_model(registry, spec)
    names = declared(model)
    if model is None:
        return dict(options)
    given = {k: v for k, v in options.items() if names is None or k in names or k not in command_wide}
    for key in given:
        if names is not None and key not in names:
            raise SpecError(unknown_option(str(spec), key, names))
    try:
        checked = model.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise SpecError(f"{spec}: option {where}: {err['msg']}") from None
    return {k: getattr(checked, k) for k in given}


def unknown_option(spec: str, key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{spec}: unknown option {key!r} (known: {', '.join(sorted(known))}){hint}"


def parse_value(text: str) -> Any:
    """A command-line option value: JSON when it reads as JSON (8, 0.5, true, [1, 10]), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def resolve_spec(registry: Any, spec: str, root: Path) -> str:
    """The spec with its names checked and local paths made absolute, by its kind (unchanged if it says nothing)."""
    factory, prefix, rest = _factory(registry, spec)
    hook = getattr(factory, "resolve_spec", None)
    return spec if hook is None else f"{prefix}:{hook(rest, root)}"


def model_class(registry: Any, spec: str, options: dict[str, Any] | None = None) -> Any:
    """The class the kind of `spec` would build with `options` (None if it does not say)."""
    factory, _, rest = _factory(registry, spec)
    if isinstance(factory, type):
        return factory
    hook = getattr(factory, "model_class", None)
    if not callable(hook):
        return None
    params = inspect.signature(hook).parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    names = {p.name for p in params}
    return hook(rest, **{k: v for k, v in (options or {}).items() if takes_any or k in names})


# -- helpers the kinds share for `resolve_spec` ----------------------------------------------
def local_path(p: str, root: Path, must_exist: bool) -> str:
    """A local path made absolute against `root`; a missing local-looking one is an error, else a hub id."""
    cand = Path(p).expanduser()
    here = cand if cand.is_absolute() else root / cand
    if here.exists():
        return str(here.resolve())
    if must_exist or p.startswith(("/", ".", "~")):
        raise SpecError(f"{p}: no such file or folder (a relative path is read from {root})")
    return p  # a hub id (checked when loaded: a dry run of a paper preset must work offline)


def folder(rest: str, root: Path) -> str:
    """`resolve_spec` of kinds whose target is always a local folder."""
    return local_path(rest, root, True)


def model_or_builtin(rest: str, root: Path) -> str:
    """`resolve_spec` of kinds whose target is `builtin:NAME`, a local folder or a hub id."""
    if rest.startswith("builtin:"):
        return resolve_spec(ENGINES, rest, root)  # the builtin engine kind checks the name
    return local_path(rest, root, False)
