"""Packed rows (`document_ids`): several examples in one row give each the logits it has alone,
for every positional scheme, causal and bidirectional."""

from __future__ import annotations

import pytest
import torch

from xfmr.nn.config import ModelConfig
from xfmr.nn.masks import document_positions
from xfmr.nn.models import build_model

LENGTHS = (5, 3, 4)  # three examples packed into one row of 12, then 2 padding tokens


def _model(arch: str, pos: str, **settings) -> torch.nn.Module:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=40, arch=arch, n_layers=2, n_heads=4, d_model=32, pos={"name": pos}, **settings
    )
    return build_model(config).eval()


def test_positions_restart_at_each_document():
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [5, 5, 7, 7, 7, 7, 7, 9, 9]])
    expected = [[0, 1, 2, 0, 1, 0, 1, 2, 3], [0, 1, 0, 1, 2, 3, 4, 0, 1]]
    assert document_positions(ids).tolist() == expected


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "learned", "relative", "rotary", "alibi"])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_packed_examples_have_the_logits_they_have_alone(arch, pos):
    settings = dict(n_kv_heads=2, window=3) if arch == "decoder" else {}
    model = _model(arch, pos, **settings)
    torch.manual_seed(1)
    examples = [torch.randint(1, 40, (n,)) for n in LENGTHS]
    packed = torch.cat([*examples, torch.zeros(2, dtype=torch.long)])[None]  # (1, 14)
    documents = torch.cat([torch.full((n,), i) for i, n in enumerate([*LENGTHS, 2])])[
        None
    ]  # the padding is a document of its own, masked out as well
    attention_mask = (torch.arange(14) < sum(LENGTHS)).long()[None]
    with torch.no_grad():
        together = model(packed, attention_mask, document_ids=documents)[0]
        start = 0
        for example in examples:
            alone = model(example[None])[0]
            got = together[start : start + len(example)]
            assert (got - alone).abs().max() < 1e-5, (start, (got - alone).abs().max())
            start += len(example)


def test_packed_rows_refuse_a_cache():
    from xfmr.nn.cache import KVCache

    model = _model("decoder", "rotary")
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="document_ids"):
        model(ids, document_ids=torch.zeros_like(ids), cache=KVCache())
