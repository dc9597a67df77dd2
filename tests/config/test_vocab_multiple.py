"""model.vocab_multiple from the command line: a bad value is refused in one line naming the
key, before anything heavy loads."""

from __future__ import annotations

from pathlib import Path

import pytest

import xfmr
from xfmr.errors import UserError


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("0", "vocab_multiple=0 must be a positive integer"),
        ("-8", "vocab_multiple=-8 must be a positive integer"),
        ("1.5", "model.vocab_multiple=1.5 must be an integer"),
        ("true", "model.vocab_multiple=True must be an integer"),
    ],
)
def test_a_bad_value_is_refused_in_one_line(tmp_path: Path, value: str, said: str) -> None:
    with pytest.raises(UserError) as refused:
        xfmr.compose(f"model.vocab_multiple={value}", f"hydra.run.dir={tmp_path / 'run'}")
    assert said in str(refused.value) and "\n" not in str(refused.value)
