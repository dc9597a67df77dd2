"""data.packing: a packed batch gives every example the loss and logits it has unpacked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xfmr.nn.config import ModelConfig
from xfmr.objectives.classification import ClassificationObjective
from xfmr.objectives.clm import CausalLMObjective
from xfmr.objectives.packing import first_fit, padding_share
from xfmr.objectives.seq2seq import Seq2SeqObjective

LENGTHS = (9, 2, 5, 3, 7, 1, 4)


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, 30, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _config(arch: str, pos: str) -> ModelConfig:
    return ModelConfig(
        vocab_size=30, arch=arch, n_layers=2, n_heads=4, d_model=32, pos={"name": pos}
    )


def test_first_fit_fills_rows_longest_first_on_every_side():
    assert first_fit([[5], [4], [3], [2], [1]], [6]) == [[0, 4], [1, 3], [2]]
    assert first_fit([[3, 1], [3, 5], [2, 2]], [6, 6]) == [[0, 1], [2]]


@pytest.mark.parametrize(
    ("arch", "pooling", "pos"),
    [
        ("encoder", "first", "learned"),
        ("encoder", "mean", "relative"),
        ("decoder", "last", "rotary"),
        ("decoder", "mean", "alibi"),
        ("encoder", "first", "sinusoidal"),
    ],
)
def test_packed_classification_equals_unpacked(arch, pooling, pos):
    objective = ClassificationObjective(pooling=pooling)
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    objective.bind_labels(["a", "b", "c"])
    torch.manual_seed(0)
    model = objective.build_model(_config(arch, pos)).eval()
    examples = [(_ids(n, i), None, i % 3) for i, n in enumerate(LENGTHS)]
    batch = objective.collate(examples)
    packed = objective.pack(batch)
    assert packed["input_ids"].size(0) < batch["input_ids"].size(0)
    assert padding_share(packed["attention_mask"]) < padding_share(batch["attention_mask"])
    with torch.no_grad():
        (loss, logits), (packed_loss, packed_logits) = (
            objective.forward(model, b) for b in (batch, packed)
        )
    assert (packed_logits - logits).abs().max() < 1e-5
    assert torch.allclose(packed_loss["examples"], loss["examples"], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("pos", ["sinusoidal", "relative", "rotary", "learned"])
def test_packed_translation_equals_unpacked(pos):
    objective = Seq2SeqObjective(label_smoothing=0.1)
    objective.pad_id, objective.bos_id, objective.eos_id = 0, 1, 2
    torch.manual_seed(0)
    model = objective.build_model(_config("encoder_decoder", pos)).eval()
    pairs = [(_ids(n, i), _ids(LENGTHS[-1 - i], 50 + i)) for i, n in enumerate(LENGTHS)]
    batch = objective.collate(pairs)
    packed = objective.pack(batch)
    assert packed["input_ids"].size(0) < len(pairs)
    with torch.no_grad():
        (loss, logits), (packed_loss, packed_logits) = (
            objective.forward(model, b) for b in (batch, packed)
        )
    assert torch.allclose(packed_loss["tokens"], loss["tokens"], rtol=1e-6, atol=1e-5)
    for i in range(len(pairs)):  # each target's logits, wherever its row put them
        mine = packed["decoder_document_ids"] == i
        alone = logits[i, : int(batch["decoder_attention_mask"][i].sum())]
        assert (packed_logits[mine] - alone).abs().max() < 1e-5, i
    counted = [int((b["labels"] != -100).sum()) for b in (batch, packed)]
    assert counted[0] == counted[1]  # the loss divides by the same count


def test_packing_is_refused_for_an_objective_that_does_not_pack(tmp_path):
    from xfmr.data.config import DataConfig
    from xfmr.errors import UserError

    (tmp_path / "t.tsv").write_text("sentence\tlabel\ngood\t1\n")
    data = DataConfig.read({"_target_": "xfmr.data.delimited.DelimitedDataModule",
                            "train_path": str(tmp_path / "t.tsv"), "packing": True})  # fmt: skip
    # An objective of a person's own that declares no `packs` (every shipped one packs).
    with pytest.raises(UserError, match="data.packing=true: objective=mine does not pack"):
        data.check_packing("mine", False, ["classification", "seq2seq"])
    data.check_packing("classification", True, ["classification", "seq2seq"])


def test_a_packed_collate_pickles_for_loader_workers():
    import pickle

    from xfmr.objectives.packing import PackedCollate

    objective = ClassificationObjective()
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    collate = pickle.loads(pickle.dumps(PackedCollate(objective)))
    batch = collate([([5, 6, 7, 8], None, 0), ([7], None, 1), ([8], None, 0)])
    assert batch["input_ids"].size(0) == 2 and batch["labels"].tolist() == [0, 1, 0]


# --------------------------------------------------------------------------- a text corpus


def _stream_blocks(lengths: list[int], block: int, seed: int = 0) -> list:
    """Blocks of `block` + 1 ids cut every `block` ids from a stream of documents of `lengths`,
    each (ids, its tokens' documents), as `xfmr.data.text.BlockDataset` gives them packed."""
    from xfmr.data.text import BlockDataset

    ids = torch.cat([torch.tensor(_ids(n, seed + i)) for i, n in enumerate(lengths)])
    starts = np.concatenate([[0], np.cumsum(lengths)])
    dataset = BlockDataset(ids, length=block + 1, stride=block, starts=starts)
    return [dataset[i] for i in range(len(dataset))]


def _alone(ids: torch.Tensor, documents: torch.Tensor) -> list[tuple[int, int, torch.Tensor]]:
    """(start, stop, its ids and the next id if that is the same document's) of each document
    piece in a packed block of T + 1 ids: the piece run as a block of its own."""
    pieces, start = [], 0
    for t in range(1, len(ids)):
        if t == len(ids) - 1 or documents[t] != documents[start]:
            stop = t
            if documents[t] == documents[start]:  # cut by the block's end: the next id counts
                pieces.append((start, stop, ids[start : stop + 1]))
            else:
                pieces.append((start, stop, ids[start:stop]))
            start = t
    return pieces


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rotary", "alibi", "relative"])
def test_a_packed_text_block_scores_each_document_as_if_alone(pos):
    """Each document piece of a packed block gets the logits it gets run alone (positions from
    0), and the block's loss is the sum of the pieces' own: the target of a document's last
    token, the next document's first, is not counted."""
    objective = CausalLMObjective()
    torch.manual_seed(0)
    model = objective.build_model(_config("decoder", pos)).eval()
    blocks = _stream_blocks([5, 9, 1, 3, 14, 7, 2], block=12)
    batch = objective.collate(blocks)
    assert objective.pack(batch) is batch  # the data packed the blocks
    with torch.no_grad():
        packed_loss, packed_logits = objective.forward(model, batch)
        alone_loss, counted = torch.zeros(()), 0
        for row, (ids, documents) in enumerate(blocks):
            for start, stop, piece in _alone(ids, documents):
                logits = model(piece[None, : stop - start])[0]
                assert (packed_logits[row, start:stop] - logits).abs().max() < 1e-5, (row, start)
                if len(piece) > 1:
                    loss, _ = objective.forward(model, objective.collate([piece]))
                    alone_loss += loss["tokens"]
                    counted += len(piece) - 1
    assert torch.allclose(packed_loss["tokens"], alone_loss, rtol=1e-6, atol=1e-5)
    assert int(objective.counts(batch)["tokens"]) == counted
    # Boundaries inside the blocks: each document's last token predicts nothing.
    boundaries = int((batch["document_ids"][:, 1:] != batch["document_ids"][:, :-1]).sum())
    assert boundaries > 0 and counted < batch["labels"].numel() - boundaries + 1


def test_a_packed_masked_lm_block_scores_each_document_as_if_alone():
    from xfmr.objectives.mlm import MaskedLMObjective

    objective = MaskedLMObjective()
    torch.manual_seed(0)
    model = objective.build_model(_config("encoder", "learned")).eval()
    blocks = _stream_blocks([5, 9, 1, 3, 14], block=12)
    ids = torch.stack([b[0] for b in blocks])[:, :-1]
    documents = torch.stack([b[1] for b in blocks])[:, :-1]
    with torch.no_grad():
        packed = model(ids, document_ids=documents)
        for row in range(ids.size(0)):
            for document in documents[row].unique():
                mine = documents[row] == document
                alone = model(ids[row][mine][None])[0]
                assert (packed[row][mine] - alone).abs().max() < 1e-5
