"""Objectives against their definitions: BERT's masking statistics, T5's span corruption."""

from __future__ import annotations

import pytest
import torch

from xfmr.objectives import IGNORE_INDEX, CausalLMObjective
from xfmr.objectives.mlm import mask_tokens
from xfmr.objectives.span_corruption import SpanCorruptionObjective, corrupt, noise_spans

VOCAB, MASK, PAD = 1000, 1, 0


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(2, VOCAB, (256, 512), generator=generator)
    ids[:, -40:] = PAD  # padding
    ids[:, 0] = 2  # a special at every start, e.g. [CLS]
    return ids, torch.tensor([PAD, MASK, 2])


def test_mlm_selects_15_percent_with_80_10_10_replacement() -> None:
    ids, specials = _batch()
    corrupted, labels = mask_tokens(
        ids,
        mask_id=MASK,
        vocab_size=VOCAB,
        special_ids=specials,
        generator=torch.Generator().manual_seed(1),
    )
    selectable = ~torch.isin(ids, specials)
    selected = labels != IGNORE_INDEX
    assert not (selected & ~selectable).any(), "a special or padding token was selected"
    assert abs(selected.sum() / selectable.sum() - 0.15) < 0.01
    assert torch.equal(labels[selected], ids[selected])
    masked = (corrupted == MASK) & selected
    unchanged = (corrupted == ids) & selected
    replaced = selected & ~masked & ~unchanged
    n = selected.sum()
    assert abs(masked.sum() / n - 0.8) < 0.02
    # A random replacement can draw the original token (1 in ~1000): still within the bounds.
    assert abs(replaced.sum() / n - 0.1) < 0.02 and abs(unchanged.sum() / n - 0.1) < 0.02
    assert not torch.isin(corrupted[replaced], specials).any(), (
        "random replacements are never specials"
    )
    assert torch.equal(corrupted[~selected], ids[~selected])


def test_span_corruption_round_trip_reconstructs_the_text() -> None:
    generator = torch.Generator().manual_seed(0)
    sentinels = list(range(1000, 1100))
    eos = 999
    for length in (8, 31, 64, 200):
        ids = torch.randint(0, 900, (length,), generator=generator).tolist()
        spans = noise_spans(length, noise_density=0.15, mean_span_length=3.0, generator=generator)
        source, target = corrupt(ids, spans, sentinels, eos)
        assert target[-2:] == [sentinels[len(spans)], eos]
        # Put each span back in place of its sentinel.
        pieces, current, k = {}, None, None
        for token in target[:-2]:
            if token in sentinels:
                k = sentinels.index(token)
                pieces[k] = current = []
            else:
                current.append(token)
        rebuilt = []
        for token in source:
            rebuilt += pieces[sentinels.index(token)] if token in sentinels else [token]
        assert rebuilt == ids


def test_span_statistics_follow_t5() -> None:
    generator = torch.Generator().manual_seed(0)
    noise, spans_seen = 0, 0
    for _ in range(500):
        spans = noise_spans(512, noise_density=0.15, mean_span_length=3.0, generator=generator)
        noise += sum(end - start for start, end in spans)
        spans_seen += len(spans)
        assert all(end > start for start, end in spans)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), "spans never touch"
    assert noise / (500 * 512) == pytest.approx(0.15, abs=0.002)
    assert noise / spans_seen == pytest.approx(3.0, abs=0.05)


def test_span_corruption_batch_shapes_and_teacher_forcing() -> None:
    class Tok:
        vocab_size = 200

        def token_to_id(self, token: str) -> int:
            if token in ("<pad>", "</s>"):
                return {"<pad>": 0, "</s>": 1}[token]
            return 100 + int(token.removeprefix("<extra_id_").removesuffix(">"))

    objective = SpanCorruptionObjective(n_sentinels=50)
    objective.bind(Tok())
    blocks = [torch.randint(2, 90, (33,)) for _ in range(4)]
    batch = objective.collate(blocks)
    labels = batch["labels"].masked_fill(batch["labels"] == IGNORE_INDEX, 0)
    assert torch.equal(batch["decoder_input_ids"][:, 1:], labels[:, :-1]), "targets shifted right"
    assert (batch["decoder_input_ids"][:, 0] == 0).all(), "decoding starts from <pad>, as in T5"


def test_clm_targets_are_inputs_shifted_by_one() -> None:
    block = torch.arange(10)
    batch = CausalLMObjective().collate([block, block + 10])
    assert torch.equal(batch["input_ids"][0], torch.arange(9))
    assert torch.equal(batch["labels"][0], torch.arange(1, 10))


def test_label_smoothing_is_the_papers_target_distribution() -> None:
    """Loss = -sum_k q_k log p_k with q = (1 - a) onehot + a / K, padding ignored."""
    from xfmr.objectives.seq2seq import smoothed_loss

    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.randint(0, 7, (2, 5))
    labels[1, 3:] = IGNORE_INDEX
    a, K = 0.1, 7
    log_p = logits.log_softmax(-1)
    q = torch.full_like(log_p, a / K).scatter_add(
        -1, labels.clamp(min=0)[..., None], torch.full_like(log_p[..., :1], 1 - a)
    )
    per_token = -(q * log_p).sum(-1)
    expected = per_token[labels != IGNORE_INDEX].sum()  # summed: xfmr.objectives.terms
    assert torch.allclose(smoothed_loss(logits, labels, a), expected, atol=1e-5)
    assert not torch.allclose(smoothed_loss(logits, labels, 0.0), expected, atol=1e-3)


def test_seq2seq_teacher_forcing_from_start_token() -> None:
    from xfmr.objectives import Seq2SeqObjective

    class Tok:
        def token_to_id(self, token: str) -> int:
            return {"<pad>": 0, "<s>": 1, "</s>": 2}[token]

    objective = Seq2SeqObjective()
    objective.bind(Tok())
    batch = objective.collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 2], [5, 2, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["decoder_input_ids"].tolist() == [[1, 8, 9, 0, 0], [1, 8, 9, 10, 11]]
    assert batch["labels"].tolist() == [[8, 9, 2, -100, -100], [8, 9, 10, 11, 2]]


def test_parallel_files_must_align(tmp_path) -> None:
    import pytest

    from xfmr.data.parallel import ParallelDataModule
    from xfmr.errors import UserError

    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "a.en").write_text("one\n")
    files = {"train_source": tmp_path / "a.de", "train_target": tmp_path / "a.en"}
    data = ParallelDataModule(**files, val_source=tmp_path / "a.de", val_target=tmp_path / "a.en")
    with pytest.raises(UserError, match="2 lines but .* has 1"):
        data.split_text()
