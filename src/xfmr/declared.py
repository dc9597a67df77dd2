"""What a config's `_target_` declares about itself (an objective's architectures and kind of
examples, a data module's kind), read from its source without importing it.

Why not import it: objectives and data modules import torch, which takes seconds (about 3 on a
2-core CPU), and a config is checked before anything heavy loads. A declaration is a literal in the class
body (`archs = ("decoder", "rnn")`), or the `declare(...)` decorator of a factory function; where
the source does not hold it as a literal (inherited from a class in another module, computed,
or re-exported), the target is imported and asked, which is slower and gives the same answer.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

_MISSING = object()


def declare(**facts: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declarations on a factory function, as a class gives them in its body:
    `@declare(gives=("text", "pairs"))`. Keep the values literals."""

    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        function.__dict__.update(facts)
        return function

    return mark


def declared(target: str, names: Sequence[str]) -> dict[str, Any]:
    """The values of `names` that `target` ("package.module.Name") declares; a name it does not
    declare is absent. A target that cannot be found raises ImportError or AttributeError."""
    module_name, _, attribute = target.rpartition(".")
    facts = _from_source(module_name, attribute, tuple(names))
    if facts is None:
        found = getattr(importlib.import_module(module_name), attribute)
        facts = {n: getattr(found, n) for n in names if getattr(found, n, _MISSING) is not _MISSING}
    return facts


def _from_source(module_name: str, attribute: str, names: tuple[str, ...]) -> dict | None:
    path = _source(module_name)
    if path is None:
        return None
    node = _top_level(path, path.stat().st_mtime_ns).get(attribute)
    if isinstance(node, ast.FunctionDef):
        facts = _decorator_facts(node)
        return None if facts is None else {n: facts[n] for n in names if n in facts}
    facts: dict[str, Any] = {}
    while isinstance(node, ast.ClassDef):
        found = _class_facts(node)
        for name in names:
            if name not in facts and name in found:
                if found[name] is _MISSING:  # not a literal: only importing tells
                    return None
                facts[name] = found[name]
        if len(facts) == len(names) or not node.bases:
            return facts
        if len(node.bases) != 1 or not isinstance(node.bases[0], ast.Name):
            return None
        node, path = _base_class(path, node.bases[0].id)
    return None  # not found in the source (re-exported, or a base the source cannot follow)


def _source(module_name: str) -> Path | None:
    spec = importlib.util.find_spec(module_name)  # imports the parent packages, not the module
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _base_class(path: Path, name: str) -> tuple[ast.AST | None, Path]:
    """The class `name` as the module at `path` sees it: defined there, or imported with
    `from MODULE import name`."""
    nodes = _top_level(path, path.stat().st_mtime_ns)
    if isinstance(nodes.get(name), ast.ClassDef):
        return nodes[name], path
    module = _imported_from(path, name)
    source = _source(module) if module else None
    if source is None:
        return None, path
    return _top_level(source, source.stat().st_mtime_ns).get(name), source


@lru_cache(maxsize=64)
def _top_level(path: Path, mtime_ns: int) -> dict[str, ast.AST]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)} | {
        f"import:{alias.asname or alias.name}": n
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.level == 0
        for alias in n.names
    }


def _imported_from(path: Path, name: str) -> str | None:
    node = _top_level(path, path.stat().st_mtime_ns).get(f"import:{name}")
    return node.module if isinstance(node, ast.ImportFrom) else None


def _class_facts(node: ast.ClassDef) -> dict[str, Any]:
    """The class body's assignments: literal values, or _MISSING where not a literal."""
    facts = {}
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                facts[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                facts[target.id] = _MISSING
    return facts


def _decorator_facts(node: ast.FunctionDef) -> dict[str, Any] | None:
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Name)
            and decorator.func.id == "declare"
        ):
            try:
                return {k.arg: ast.literal_eval(k.value) for k in decorator.keywords if k.arg}
            except (ValueError, TypeError, SyntaxError):
                return None
    return {}
