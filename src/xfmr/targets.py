"""A config section that names a class or function by `_target_` (Hydra's spelling) with its
keyword arguments: `Target`, and what its keys may be, read from the target's source without
importing it.

Why read the source: a data module, an objective or Lightning's Trainer imports torch, which
takes seconds (about 3 on a 2-core CPU), and a config is checked before anything heavy loads.
The keyword parameters of a class's `__init__` (or a function's) are read from its module's
syntax tree; a constructor that takes `**kwargs` hands them to its base class, whose
parameters count too, as far as the source can follow it (`xfmr.declared` follows bases the
same way). Where it cannot (a C extension, a base imported from elsewhere that takes
`**kwargs` itself), the keys are not checked here and the target says what it refuses when
built. tests/test_targets.py holds this to `inspect.signature` on every shipped target.

A `Target` is built with `build`: nested mappings that name a `_target_` are built first, and
`_partial_: true` gives a `functools.partial` (an optimizer that gets its parameters later).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.keys import unknown_key

TARGET = "_target_"
PARTIAL = "_partial_"


class FrozenDict(dict):
    """A dict that refuses changes: the settings of a section of a frozen config (copied into
    a new one where the run chooses something: `Target`'s sections' `with_settings`)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a run's config is frozen: make a new one (dataclasses.replace)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return FrozenDict, (dict(self),)


def frozen(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """A frozen copy of `values`, nested mappings and lists included."""
    return FrozenDict({k: _frozen_value(v) for k, v in values.items()})


def _frozen_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozen(value)
    if isinstance(value, list | tuple):
        return tuple(_frozen_value(v) for v in value)
    return value


def plain(value: Any) -> Any:
    """`value` with read-only views and tuples made dicts and lists again (YAML, JSON)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Target:
    """A class or function named by its import path, and the keyword arguments it is built
    with.

    Args:
        path: the import path, `package.module.Name`.
        settings: its keyword arguments (a read-only mapping).
        partial: build a `functools.partial` of it rather than calling it (`_partial_`).
        section: the config section that names it (`data`, `callbacks.progress_bar`).
    """

    path: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    partial: bool = False
    section: str = field(default="", compare=False)  # where the config names it, for messages

    @classmethod
    def read(
        cls,
        section: str,
        values: Mapping[str, Any],
        *,
        check_keys: bool = True,
        supplied: tuple[str, ...] = (),
    ) -> Target:
        """From a config section as YAML spells it (`_target_`, `_partial_`, the arguments); a
        section without `_target_`, or a key the target does not take, is a UserError naming
        it and the nearest keys. `supplied`: arguments the run gives itself (an optimizer's
        parameters), which the config may not."""
        values = dict(values)
        path = values.pop(TARGET, None)
        if not path or not isinstance(path, str):
            raise UserError(f"{section}._target_ is not set: name the class or function to build")
        partial = bool(values.pop(PARTIAL, False))
        target = cls(path, frozen(values), partial, section)
        if check_keys:
            target.check_keys(section, supplied)
        return target

    def check_keys(self, section: str, supplied: tuple[str, ...] = ()) -> None:
        """Each key is a keyword the target takes (when its source says which), and not one
        the run gives it itself."""
        known = parameters(self.path)
        if known is None:
            return
        for name in self.settings:
            if name not in known or name in supplied:
                raise UserError(unknown_key(section, name, sorted(known - set(supplied))))

    def check_exists(self) -> None:
        """A target inside xfmr names a module and a name in it that exist, found from the
        source; where the name has moved, the message says where it is now. Other packages'
        targets are found when built (their modules may be compiled, their names made at
        import). Not checked when a run's saved config is read: an earlier version's
        config.yaml may name a class that has since moved, and reading it evaluates the run."""
        if not _own_target_exists(self.path):
            found = " or ".join(_own_definitions(self.name))
            where = f"; it is {found}" if found else ""
            raise UserError(
                f"{self.section}._target_={self.path}: no such class or function{where}"
            )

    @property
    def name(self) -> str:
        """The class or function's own name (`TextCorpusDataModule`)."""
        return self.path.rsplit(".", 1)[-1]

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """As a config file spells it."""
        return {
            TARGET: self.path,
            **({PARTIAL: True} if self.partial else {}),
            **plain(self.settings),
        }

    def build(self, **given: Any) -> Any:
        """The object: the target called with its settings (nested targets built first) and
        `given` (what only the run knows); with `partial`, a partial of it. Arguments it
        refuses (a TypeError or ValueError from its constructor) are a UserError naming the
        section."""
        where = self.section or self.path
        try:
            callable_ = locate(self.path)
        except (ImportError, AttributeError):
            raise UserError(f"{where}._target_={self.path}: no such class or function") from None
        kwargs = {k: _built(v) for k, v in self.settings.items()} | given
        if self.partial:
            return functools.partial(callable_, **kwargs)
        try:
            return callable_(**kwargs)
        except UserError:
            raise
        except (TypeError, ValueError) as e:
            raise UserError(f"{where}: {' '.join(str(e).split())}") from e


def _built(value: Any) -> Any:
    if isinstance(value, Mapping) and TARGET in value:
        return Target.read("", value, check_keys=False).build()
    if isinstance(value, Mapping):
        return {k: _built(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_built(v) for v in value]
    return value


def locate(path: str) -> Any:
    """The object at import path `path` (`package.module.Name`, or a nested `Class.attr`)."""
    module_name, _, attribute = path.rpartition(".")
    parts = [attribute]
    while module_name:
        try:
            found: Any = importlib.import_module(module_name)
            break
        except ModuleNotFoundError:
            module_name, _, outer = module_name.rpartition(".")
            parts.insert(0, outer)
    else:
        raise ImportError(f"no module in {path!r}")
    for part in parts:
        found = getattr(found, part)
    return found


_OWN = __name__.split(".")[0]  # xfmr: every module of it is Python source


def _own_target_exists(path: str) -> bool:
    """False only for a path inside xfmr whose module, or name in it, is not in the source
    (`Class.attr` paths: the class is found in its module)."""
    module_name, _, name = path.rpartition(".")
    if module_name.split(".")[0] != _OWN:
        return True
    while module_name.count("."):
        source = source_file(module_name)
        if source is not None:
            return _defines_name(_tree(source), name)
        module_name, _, name = module_name.rpartition(".")
    return False


def _defines_name(tree: ast.Module, name: str) -> bool:
    """Whether a module's top level (its `if` and `try` blocks included) defines or imports
    `name`, or answers any name (a module `__getattr__`)."""
    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If | ast.Try):
            statements += [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            statements += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return name in names or "__getattr__" in names


def _own_definitions(name: str) -> list[str]:
    """Where in xfmr a class or function called `name` is defined (`package.module.Name`)."""
    root = source_file(_OWN)
    if root is None:
        return []
    found = []
    for source in sorted(root.parent.rglob("*.py")):
        if any(_defines(node, name) for node in _tree(source).body):
            module = source.relative_to(root.parent.parent).with_suffix("")
            parts = module.parts[:-1] if module.name == "__init__" else module.parts
            found.append(".".join((*parts, name)))
    return found


@functools.cache
def parameters(path: str) -> frozenset[str] | None:
    """The keyword parameters of the class or function at `path`, read from its source; None
    where the source does not say (see the module's doc)."""
    module_name, _, name = path.rpartition(".")
    source = source_file(module_name)
    found = None if source is None else _parameters_in(source, name, depth=0)
    return frozenset() if found is _NO_INIT else found


_NO_INIT = object()  # a class that defines no __init__ of its own: its bases' decides


def _parameters_in(source: Path, name: str, *, depth: int) -> Any:
    """`name`'s parameters in the module at `source`: a set, None (not known), or _NO_INIT."""
    if depth > 8:
        return None
    tree = _tree(source)
    node = next((n for n in tree.body if _defines(n, name)), None)
    if node is None:
        return _imported_parameters(tree, source, name, depth)
    if isinstance(node, ast.FunctionDef):
        own, forwards = _signature(node.args)
        return None if forwards else own  # where **kwargs go, the source does not say
    init = next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    if init is None:
        return _base_parameters(source, node, depth)
    own, forwards = _signature(init.args)
    if not forwards:
        return own
    inherited = _base_parameters(source, node, depth)
    return (
        None if inherited is None else own | (frozenset() if inherited is _NO_INIT else inherited)
    )


def _defines(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name


def _signature(args: ast.arguments) -> tuple[frozenset[str], bool]:
    """(keyword parameter names, whether it takes **kwargs)."""
    names = [a.arg for a in (*args.posonlyargs[1:], *args.args, *args.kwonlyargs)]
    return frozenset(n for n in names if n not in ("self", "cls")), args.kwarg is not None


def _base_parameters(source: Path, node: ast.ClassDef, depth: int) -> Any:
    """The parameters of the first base, in order, that defines an __init__ (as Python's method
    resolution finds it for single chains and mixins without one)."""
    for base in node.bases:
        if not isinstance(base, ast.Name):
            return None
        found = _parameters_in(source, base.id, depth=depth + 1)
        if found is not _NO_INIT:
            return found
    return _NO_INIT


def _imported_parameters(tree: ast.Module, source: Path, name: str, depth: int) -> Any:
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            module = _absolute(node, source)
            found = source_file(module) if module else None
            return _parameters_in(found, alias.name, depth=depth + 1) if found else None
    return None


def _absolute(node: ast.ImportFrom, source: Path) -> str | None:
    if not node.level:
        return node.module
    return None  # relative imports: the source does not say which package without importing


@functools.cache
def _tree(source: Path) -> ast.Module:
    return ast.parse(source.read_text(encoding="utf-8"), filename=str(source))


def source_file(module_name: str) -> Path | None:
    """The .py file of `module_name`, found without importing it or its parent packages (a
    package's `__init__` may import torch): the top-level package is located, and the path
    walked from there."""
    top, *rest = module_name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for root in roots:
        base = Path(root).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


class TargetSection:
    """A section that is a `Target` (`self.target`): its settings read as attributes too, so
    that the attribute path of a value is its key on the command line (`config.data.batch_size`
    is `data.batch_size=...`). The section's own properties come first."""

    target: Target

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__.get("target")  # absent while a pickled copy is rebuilt
        if target is None or name.startswith("_") or name not in target.settings:
            raise AttributeError(f"{type(self).__name__} has no {name!r}")
        return target.settings[name]
