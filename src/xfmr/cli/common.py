"""What every entry point shares: one clean line for a person's mistake, the config tree."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import yaml


def fail(prog: str, message: str, code: int = 2) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def print_config_tree(cfg: Mapping[str, Any], order: tuple[str, ...] = ()) -> None:
    """A run's config (`RunConfig.to_dict`) as a rich tree, one branch per top-level section."""
    from rich import print as rprint
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree("config", guide_style="dim")
    keys = [k for k in order if k in cfg] + [k for k in cfg if k not in order]
    for key in keys:
        value = cfg[key]
        branch = tree.add(f"[bold]{key}[/bold]")
        text = yaml.safe_dump(value, sort_keys=False) if isinstance(value, Mapping) else str(value)
        branch.add(Syntax(text.rstrip(), "yaml", background_color="default"))
    rprint(tree)
