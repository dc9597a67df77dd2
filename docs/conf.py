"""The documentation site: `make docs` builds docs/ into docs/_build/html, `make docs-serve`
serves it and rebuilds it as you edit.

Sphinx, because it is actively released and fails a build on any warning (`-W`); `nitpicky`
makes every reference it cannot resolve a warning; autodoc documents the API from the
docstrings; and MyST keeps every page Markdown, which GitHub renders too. (MkDocs' core has
had no release since 2024.)

Nothing here reaches the network (no intersphinx): CI builds the site offline.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

# The xfmr beside these pages, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from xfmr import __version__  # noqa: E402  (xfmr's __init__ imports no torch)

project = "xfmr"
version = release = __version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "xfmr"
html_show_copyright = False  # no copyright line naming no one

# `page.md#a-heading` links resolve, to headings down to ###.
myst_heading_anchors = 3
# Docstrings are plain text with `backticks` for code: reST reads them so, as MyST does.
default_role = "code"

# `make docs` fails on any warning (-W), a missing image's among them; nitpicky makes every
# reference that does not resolve one too: a broken link, an unknown xfmr name...
nitpicky = True
# ...but the types from other packages in signatures, which these pages do not document and
# could link to only through intersphinx, which fetches their inventories over the network.
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(torch|torchmetrics|tokenizers|lightning|omegaconf|pandas|numpy|matplotlib)(\..+)?",
    ),
    (r"py:.*", r"(pathlib|collections\.abc)\..+"),  # the standard library's
]

# The docstrings are Google style (Args:, Returns:, Raises:, Attributes:).
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
# Imported for type checking alone, so autodoc cannot evaluate it unaided.
autodoc_type_aliases = {"TextTokenizer": "xfmr.text.tokenizers.TextTokenizer"}


def _key_attributes(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A dataclass whose fields declare a `Key` (`xfmr.nn.config.ModelConfig`, `PosConfig`):
    each field documented as an attribute, with its type, its default and what its `Key` says.
    (Autodoc finds no docstring on a field, so it would list none of them.)"""
    if what != "class" or not is_dataclass(obj):
        return
    from xfmr.nn.config import ARCHS

    for f in fields(obj):
        key = f.metadata.get("key")
        if key is None:
            continue
        lines.extend(["", f".. attribute:: {f.name}", f"   :type: {f.type}"])
        if f.default is not MISSING:
            lines.append(f"   :value: {f.default!r}")
        facts = [key.doc]
        if key.choices:
            facts.append(f"one of {', '.join(key.choices)}")
        if key.archs != ARCHS:
            facts.append(f"read by arch {', '.join(key.archs)} only")
        if key.fine_tune:
            facts.append("a run started `init_from` another may change it")
        lines.extend(["", f"   {'; '.join(facts)}."])


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _key_attributes)
