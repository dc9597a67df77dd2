"""The loss of an optimizer step is that of one batch holding all of its micro-batches: for every
shipped objective, k micro-batches accumulated (and split over DDP ranks) give the gradient of
the one batch they were cut from, through the module's own loss path and the loader's window
counts; the training loader attaches the right totals to each window."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from helpers.step_module import step_module
from xfmr.data.order import COUNTS, WINDOW_COUNTS, CountedCollate, TrainingLoader, counted_windows
from xfmr.kinds import QAItem, QAWindow
from xfmr.objectives.classification import ClassificationObjective
from xfmr.objectives.clm import CausalLMObjective
from xfmr.objectives.contract import Objective
from xfmr.objectives.mlm import MaskedLMObjective
from xfmr.objectives.nsp import MaskedLMNextSentenceObjective, NextSentenceObjective
from xfmr.objectives.qa import QuestionAnsweringObjective
from xfmr.objectives.seq2seq import Seq2SeqObjective
from xfmr.objectives.span_corruption import SpanCorruptionObjective, sentinel
from xfmr.objectives.tagging import TaggingObjective
from xfmr.objectives.terms import TermLoss, loss_sums
from xfmr.training.module import XfmrModule

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 40
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "<pad>", "<s>", "</s>"]
SPECIALS += [sentinel(i) for i in range(4)]
ROWS, K = 8, 4  # one batch of 8 rows, or 4 micro-batches
CUTS = (0, 1, 3, 6, 8)


class Vocabulary:
    """What the objectives ask of a tokenizer: special tokens' ids and the vocabulary size."""

    vocab_size = VOCAB

    def token_to_id(self, token: str) -> int | None:
        return SPECIALS.index(token) if token in SPECIALS else None

    def special_ids(self) -> set[int]:
        return set(range(len(SPECIALS)))


def _words(draw: random.Random, low: int = 1, high: int = 9) -> list[int]:
    return [draw.randrange(len(SPECIALS), VOCAB) for _ in range(draw.randint(low, high))]


def _blocks(draw: random.Random, pad: int | None = None) -> list[torch.Tensor]:
    """Blocks of 13 ids; with `pad`, each ends in a different amount of padding."""
    blocks = []
    for row in range(ROWS):
        ids = torch.tensor(_words(draw, 13, 13))
        if pad is not None:
            ids[13 - 2 * row :] = pad
        blocks.append(ids)
    return blocks


def _qa_items(draw: random.Random) -> list[QAItem]:
    items = []
    for row in range(ROWS):
        context = _words(draw, 3, 10)
        start = draw.randrange(len(context))
        window = QAWindow(
            question_ids=_words(draw, 1, 3),
            context_ids=context,
            context_offsets=[(i, i + 1) for i in range(len(context))],
            answer=(start, min(len(context) - 1, start + 1)) if row % 3 else None,
        )
        items.append(QAItem(id=str(row), context="x" * 12, answers=["x"], windows=[window]))
    return items


def _case(name: str, draw: random.Random) -> tuple[Objective, str, list[Any]]:
    """(objective, architecture, examples of ROWS rows whose counted targets differ)."""
    pairs = [(_words(draw), _words(draw), draw.randrange(2)) for _ in range(ROWS)]
    if name == "clm":
        return CausalLMObjective(pad_id=0), "decoder", _blocks(draw, pad=0)
    if name == "mlm":
        return MaskedLMObjective(select_rate=0.3), "encoder", _blocks(draw)
    if name == "nsp":
        return NextSentenceObjective(max_length=16), "encoder", pairs
    if name == "mlm_nsp":
        return MaskedLMNextSentenceObjective(max_length=16, select_rate=0.3), "encoder", pairs
    if name == "span_corruption":
        objective = SpanCorruptionObjective(n_sentinels=4, noise_density=0.3)
        return objective, "encoder_decoder", _blocks(draw)
    if name == "seq2seq":
        examples = [(_words(draw), _words(draw)) for _ in range(ROWS)]
        return Seq2SeqObjective(label_smoothing=0.1), "encoder_decoder", examples
    if name == "classification":
        objective = ClassificationObjective(max_length=16)
        objective.bind_labels(["no", "yes", "maybe"])
        examples = [
            (_words(draw), _words(draw) if row % 2 else None, row % 3) for row in range(ROWS)
        ]
        return objective, "encoder", examples
    if name == "tagging":
        objective = TaggingObjective(max_length=12)
        objective.bind_labels(["O", "B-X", "I-X"])
        sentences = []
        for _ in range(ROWS):
            words = [_words(draw, 1, 3) for _ in range(draw.randint(1, 6))]
            sentences.append((words, [draw.randrange(3) for _ in words]))
        return objective, "encoder", sentences
    if name == "qa":
        return QuestionAnsweringObjective(), "encoder", _qa_items(draw)
    raise AssertionError(name)


OBJECTIVES = [
    "clm",
    "mlm",
    "nsp",
    "mlm_nsp",
    "span_corruption",
    "seq2seq",
    "classification",
    "tagging",
    "qa",
]


def _module(objective: Objective, arch: str, *, world_size: int = 1) -> XfmrModule:
    return step_module(objective, arch, vocab_size=VOCAB, world_size=world_size)


def _rows(batch: dict[str, Any], rows: slice) -> dict[str, Any]:
    """The rows of a collated batch (what a smaller batch of the same examples gives, but for
    padding, which changes nothing); QA's span sources serve only decoding."""
    return {k: v[rows] for k, v in batch.items() if isinstance(v, torch.Tensor)}


def _gradients(module: XfmrModule) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


def _one_batch(name: str) -> tuple[dict[str, Any], Objective, str]:
    objective, arch, examples = _case(name, random.Random(0))
    objective.bind(Vocabulary())
    torch.manual_seed(1)  # masking and corruption are drawn once, for the whole batch
    return objective.collate(examples), objective, arch


def _step(module: XfmrModule, micro_batches: list[dict[str, Any]], *, k: int) -> None:
    """The module's training step on `micro_batches` in windows of k, as the training loader
    hands them out, with the counts it attaches to each (the batch's own, and its window's)."""
    counted = [{**b, COUNTS: module.objective.counts(b)} for b in micro_batches]
    for index, window in enumerate(counted_windows(iter(counted), position=0, size=k)):
        module.training_step(window, index)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_accumulated_micro_batches_give_the_one_batch_gradient(name: str) -> None:
    batch, objective, arch = _one_batch(name)
    whole = _module(objective, arch)
    _step(whole, [_rows(batch, slice(None))], k=1)
    expected = _gradients(whole)

    # Micro-batches of 1, 2, 3 and 2 rows: one target per row still counts unequally.
    micro = [_rows(batch, slice(a, b)) for a, b in zip(CUTS, CUTS[1:], strict=False)]
    counts = [objective.counts(b) for b in micro]
    assert any(c != counts[0] for c in counts), f"{name}: the micro-batches count alike"
    accumulated = _module(objective, arch)
    _step(accumulated, micro, k=K)
    for got, want in zip(_gradients(accumulated), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    # The reported loss is the one batch's too.
    torch.testing.assert_close(accumulated.step_loss(), whole.step_loss(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mlm_nsp", "tagging"])
def test_a_window_without_counts_is_counted_by_the_step(name: str) -> None:
    """Micro-batches that carry no counts (not made by xfmr's loaders) are counted by the
    objective in the training step, the window's totals added there: still the one batch."""
    batch, objective, arch = _one_batch(name)
    whole = _module(objective, arch)
    _step(whole, [_rows(batch, slice(None))], k=1)
    uncounted = _module(objective, arch)
    uncounted.training_step(
        [_rows(batch, slice(a, b)) for a, b in zip(CUTS, CUTS[1:], strict=False)], 0
    )
    for got, want in zip(_gradients(uncounted), _gradients(whole), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["mlm_nsp", "seq2seq"])
def test_ddp_ranks_and_accumulation_give_the_one_batch_gradient(name: str) -> None:
    """Two ranks of two micro-batches each: the ranks' window totals are added (as the
    strategy's all-reduce does), and their gradients averaged (as DDP does)."""
    batch, objective, arch = _one_batch(name)
    whole = _module(objective, arch)
    _step(whole, [_rows(batch, slice(None))], k=1)

    per, ranks, k = ROWS // 4, 2, 2
    shares = [
        [_rows(batch, slice((r * k + i) * per, (r * k + i + 1) * per)) for i in range(k)]
        for r in range(ranks)
    ]
    # Each rank's window totals, added over the ranks: what `_all_ranks` gives every rank.
    totals = [
        sum(objective.counts(b)[t] for share in shares for b in share) for t in objective.loss_terms
    ]
    gradients = []
    for share in shares:
        module = _module(objective, arch, world_size=ranks)
        module._all_ranks = lambda values, totals=totals: (
            torch.stack(totals) if values.shape == (len(totals),) else values
        )
        _step(module, share, k=k)
        gradients.append(_gradients(module))
    for *per_rank, want in zip(*gradients, _gradients(whole), strict=True):
        torch.testing.assert_close(sum(per_rank) / ranks, want, rtol=1e-4, atol=1e-6)


def test_validation_loss_weights_each_term_by_its_own_count() -> None:
    metric = TermLoss(("mlm", "nsp"))
    metric.update(
        {"mlm": torch.tensor(6.0), "nsp": torch.tensor(1.0)},
        {"mlm": torch.tensor(3), "nsp": torch.tensor(2)},
    )
    metric.update(
        {"mlm": torch.tensor(1.0), "nsp": torch.tensor(3.0)},
        {"mlm": torch.tensor(1), "nsp": torch.tensor(2)},
    )
    assert metric.compute().item() == pytest.approx(7 / 4 + 4 / 4)


class _Counted(Dataset):
    """Examples whose batches count a known number of targets: example i counts i + 1."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return index


def _collate(examples: list[int]) -> dict[str, torch.Tensor]:
    return {"labels": torch.tensor(examples)}


def _count(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"tokens": (batch["labels"] + 1).sum()}


def _loader(num_workers: int = 0) -> TrainingLoader:
    return TrainingLoader(
        _Counted(),
        batch_size=2,
        collate_fn=CountedCollate(_collate, _count),
        num_workers=num_workers,
        seed=3,
        accumulate=2,
    )


def _windows(loader: TrainingLoader) -> list[list[tuple[int, int]]]:
    """(the batch's count, its window's) for each batch of each window the loader hands out."""
    return [
        [(int(b[COUNTS]["tokens"]), int(b[WINDOW_COUNTS]["tokens"])) for b in window]
        for window in loader
    ]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_loader_gives_each_batch_its_windows_totals(num_workers: int) -> None:
    loader = _loader(num_workers)
    loader.order.set_epoch(0)
    windows = _windows(loader)
    # 5 batches of 2: windows [0, 2), [2, 4) and the short [4, 5), one optimizer step each.
    assert [len(w) for w in windows] == [2, 2, 1] and len(loader) == 3
    seen = [batch for window in windows for batch in window]
    assert sum(count for count, _ in seen) == sum(range(1, 11))
    for first in (0, 2):
        window = seen[first][0] + seen[first + 1][0]
        assert seen[first][1] == seen[first + 1][1] == window
    assert seen[4][1] == seen[4][0], "the last window is short: its own count"
    assert loader.position == 5, "the place counts batches handed out, not read ahead"


def test_a_loader_resumed_mid_window_counts_what_is_left_of_it() -> None:
    loader = _loader()
    loader.order.set_epoch(1)
    full = [batch for window in _windows(loader) for batch in window]
    resumed = _loader()
    resumed.order.set_epoch(1)
    resumed.load_state_dict({"position": 3})
    windows = _windows(resumed)
    assert [len(w) for w in windows] == [1, 1], "what is left of [2, 4), then [4, 5)"
    rest = [batch for window in windows for batch in window]
    assert [count for count, _ in rest] == [count for count, _ in full[3:]], "same batches"
    assert rest[0][1] == rest[0][0], "batch 3 ends the window [2, 4): only it is left"
    assert rest[1] == full[4]


class _MeanCLM(CausalLMObjective):
    """An objective written for the earlier contract: forward returns the mean loss."""

    def forward(self, model, batch):
        sums, logits = super().forward(model, batch)
        return sums["tokens"] / self.counts(batch)["tokens"].clamp(min=1), logits


def test_an_objective_that_returns_a_mean_is_taken_as_the_mean_over_its_count() -> None:
    batch, objective, arch = _one_batch("clm")
    gradients = []
    for objective in (CausalLMObjective(pad_id=0), _MeanCLM(pad_id=0)):
        module = _module(objective, arch)
        _step(
            module, [_rows(batch, slice(a, b)) for a, b in zip(CUTS, CUTS[1:], strict=False)], k=K
        )
        gradients.append(_gradients(module))
    for got, want in zip(*gradients, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_loss_terms_that_do_not_match_the_counts_are_refused() -> None:
    with pytest.raises(TypeError, match=r"objective x: forward returned loss terms \['mlm'\]"):
        loss_sums("x", {"mlm": torch.tensor(1.0)}, {"mlm": torch.tensor(1), "nsp": torch.tensor(1)})
    with pytest.raises(TypeError, match="return a sum per term"):
        loss_sums("x", torch.tensor(1.0), {"mlm": torch.tensor(1), "nsp": torch.tensor(1)})


def test_a_stream_s_batches_carry_their_windows_totals_too() -> None:
    """A training loader that is no TrainingLoader (data.streaming=true) windows from the start."""
    from torch.utils.data import IterableDataset

    from xfmr.data.base import make_loader

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    loader = make_loader(
        Stream(),
        batch_size=2,
        shuffle=False,
        num_workers=0,
        collate_fn=CountedCollate(_collate, _count),
        window=3,
    )
    seen = _windows(loader)  # counts 1+2, 3+4, 5+6 | 7+8, 9+10
    assert seen == [[(3, 21), (7, 21), (11, 21)], [(15, 34), (19, 34)]]


def test_xfmr_eval_s_loss_is_the_whole_split_s_per_term() -> None:
    from xfmr.runs.evaluation import evaluate_loss

    batch, objective, arch = _one_batch("mlm_nsp")
    module = _module(objective, arch).eval()
    run = SimpleNamespace(objective=objective, model=module.model, device=torch.device("cpu"))
    with torch.no_grad():
        sums, _ = objective.forward(module.model, batch)
    counts = objective.counts(batch)
    micro = [_rows(batch, slice(a, b)) for a, b in zip(CUTS, CUTS[1:], strict=False)]
    report = evaluate_loss(run, micro)
    want = sum(float(sums[t]) / int(counts[t]) for t in ("mlm", "nsp"))
    assert report["loss"] == pytest.approx(want, rel=1e-5)
    assert report["targets"] == int(counts["mlm"])
    assert report["terms"]["nsp"]["targets"] == ROWS


def test_the_run_summary_times_and_counts_optimizer_steps_not_micro_batches() -> None:
    """Under accumulation a step is all of its micro-batches, the window a training batch
    holds: ms_per_step, tokens_per_step (and tokens/s, their ratio) are the optimizer step's,
    as without accumulation."""
    from xfmr.training.run_summary import RunSummary

    trainer = SimpleNamespace(
        world_size=1, global_step=0, log_every_n_steps=50, max_steps=0, should_stop=False
    )
    summary = RunSummary(peak_tflops=None, cache_dir=None)
    window = [{"input_ids": torch.zeros(4, 16, dtype=torch.long)} for _ in range(2)]
    for index in range(3):  # three steps of two micro-batches
        trainer.global_step += 1
        summary.on_train_batch_end(trainer, None, None, window, index)
    assert summary.tokens_per_step == 2 * 4 * 16
    assert summary._window_steps == 2  # steps 2 and 3; the window opens at step 1's end
    assert summary._window_tokens == 2 * 2 * 4 * 16
