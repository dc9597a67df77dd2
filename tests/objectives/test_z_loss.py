"""PaLM's z-loss (Chowdhery et al. 2022, sec. 5), `objective.z_loss`: z_loss * log(Z)^2 at each
counted token, an auxiliary term counted as the cross-entropy's, so that gradient accumulation
gives the one batch's loss; off (0) it changes nothing; the reported loss leaves it out."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.step_module import step_module
from xfmr.data.order import COUNTS, counted_windows
from xfmr.errors import UserError
from xfmr.objectives.clm import CausalLMObjective
from xfmr.objectives.common import IGNORE_INDEX, Z_LOSS
from xfmr.objectives.config import ObjectiveConfig
from xfmr.objectives.contract import Objective
from xfmr.objectives.nsp import MaskedLMNextSentenceObjective
from xfmr.objectives.seq2seq import Seq2SeqObjective
from xfmr.objectives.terms import TermLoss, loss_sums
from xfmr.training.module import XfmrModule

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 40
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "<pad>", "<s>", "</s>"]
CUTS = (0, 1, 3, 6, 8)  # micro-batches of 1, 2, 3 and 2 rows of 8


class _Logits(nn.Module):
    """A 'model' that returns fixed logits, whatever it reads."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, *inputs: Any) -> torch.Tensor:
        return self.logits


def _fixed() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits (2, 5, 7) far from normalised (log Z near 3), labels with ignored tokens."""
    generator = torch.Generator().manual_seed(0)
    logits = 2.0 * torch.randn(2, 5, 7, generator=generator) + 1.0
    labels = torch.randint(0, 7, (2, 5), generator=generator)
    labels[0, :2] = IGNORE_INDEX
    labels[1, 4] = IGNORE_INDEX
    return logits, {"input_ids": torch.zeros(2, 5, dtype=torch.long), "labels": labels}


def test_the_z_term_is_the_weighted_sum_of_log_z_squared_over_counted_tokens() -> None:
    logits, batch = _fixed()
    objective = CausalLMObjective(z_loss=0.5)
    sums, _ = objective.forward(_Logits(logits), batch)
    counted = batch["labels"] != IGNORE_INDEX
    log_z = torch.logsumexp(logits, dim=-1)  # (B, T)
    assert log_z[counted].abs().min() > 1, "Z far from 1: the term is not near 0"
    torch.testing.assert_close(sums[Z_LOSS], 0.5 * log_z[counted].square().sum())
    log_p = logits.log_softmax(-1)
    picked = log_p.gather(-1, batch["labels"].clamp(min=0)[..., None])[..., 0]
    torch.testing.assert_close(sums["tokens"], -picked[counted].sum())
    counts = objective.counts(batch)
    assert counts == {"tokens": counted.sum(), Z_LOSS: counted.sum()}


def test_z_loss_off_is_bit_for_bit_the_cross_entropy_alone() -> None:
    logits, batch = _fixed()
    before = F.cross_entropy(
        logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    for objective in (CausalLMObjective(), CausalLMObjective(z_loss=0.0)):
        sums, _ = objective.forward(_Logits(logits), batch)
        assert sums.keys() == objective.counts(batch).keys() == {"tokens"}
        assert torch.equal(sums["tokens"], before)
    # With z on, its cross-entropy term is the same number: the z term is apart.
    sums, _ = CausalLMObjective(z_loss=1e-4).forward(_Logits(logits), batch)
    torch.testing.assert_close(sums["tokens"], before, rtol=0, atol=1e-6)


def test_the_reported_loss_leaves_the_z_term_out() -> None:
    logits, batch = _fixed()
    objective = CausalLMObjective(z_loss=0.5)
    sums, _ = objective.forward(_Logits(logits), batch)
    counts = objective.counts(batch)
    reported = TermLoss(objective.loss_terms)
    reported.update(loss_sums(objective.name, sums, counts), counts)
    torch.testing.assert_close(reported.compute(), sums["tokens"] / counts["tokens"])


class _Vocabulary:
    vocab_size = VOCAB

    def token_to_id(self, token: str) -> int | None:
        return SPECIALS.index(token) if token in SPECIALS else None

    def special_ids(self) -> set[int]:
        return set(range(len(SPECIALS)))


def _words(draw: random.Random, low: int, high: int) -> list[int]:
    return [draw.randrange(len(SPECIALS), VOCAB) for _ in range(draw.randint(low, high))]


def _case(name: str, z_loss: float) -> tuple[Objective, str, list[Any]]:
    """(objective, architecture, 8 examples whose counted tokens differ row to row)."""
    draw = random.Random(0)
    if name == "clm":
        blocks = []
        for row in range(8):
            ids = torch.tensor(_words(draw, 13, 13))
            ids[13 - row :] = 0  # padding, ignored
            blocks.append(ids)
        return CausalLMObjective(pad_id=0, z_loss=z_loss), "decoder", blocks
    if name == "seq2seq":
        pairs = [(_words(draw, 1, 9), _words(draw, 1, 9)) for _ in range(8)]
        return Seq2SeqObjective(label_smoothing=0.1, z_loss=z_loss), "encoder_decoder", pairs
    pairs = [(_words(draw, 1, 9), _words(draw, 1, 9), draw.randrange(2)) for _ in range(8)]
    objective = MaskedLMNextSentenceObjective(max_length=16, select_rate=0.3, z_loss=z_loss)
    return objective, "encoder", pairs


def _module(objective: Objective, arch: str) -> XfmrModule:
    return step_module(objective, arch, vocab_size=VOCAB)


def _step(name: str, z_loss: float, cuts: tuple[int, ...]) -> XfmrModule:
    """One optimizer step on the case's batch cut at `cuts`, through the training loader's
    window counts (`counted_windows`) and the module's training step."""
    objective, arch, examples = _case(name, z_loss)
    objective.bind(_Vocabulary())
    torch.manual_seed(1)  # masking drawn once, for the whole batch
    batch = objective.collate(examples)
    micro = [{k: v[a:b] for k, v in batch.items()} for a, b in zip(cuts, cuts[1:], strict=False)]
    counted = [{**b, COUNTS: objective.counts(b)} for b in micro]
    module = _module(objective, arch)
    for index, window in enumerate(counted_windows(iter(counted), position=0, size=len(micro))):
        module.training_step(window, index)
    return module


@pytest.mark.parametrize("name", ["clm", "seq2seq", "mlm_nsp"])
def test_accumulated_micro_batches_give_the_one_batch_z_term(name: str) -> None:
    whole = _step(name, 0.5, (0, 8))
    accumulated = _step(name, 0.5, CUTS)
    z_whole, z_accumulated = whole.step_terms()[Z_LOSS], accumulated.step_terms()[Z_LOSS]
    assert z_whole > 0.01, "the z term is not near 0: an error in its count would show"
    torch.testing.assert_close(z_accumulated, z_whole, rtol=0, atol=1e-6)
    # The whole loss (~10) within float32's rounding of it: 1e-6 of it.
    torch.testing.assert_close(accumulated.step_loss(), whole.step_loss(), rtol=1e-6, atol=1e-6)
    for got, want in zip(accumulated.parameters(), whole.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-6)
    # The optimised loss is the cross-entropy's plus the z term.
    off = _step(name, 0.0, (0, 8))
    torch.testing.assert_close(whole.step_loss(), off.step_loss() + z_whole)
    assert off.step_terms() == {}


def test_z_loss_off_trains_bit_for_bit_as_before() -> None:
    """The step's loss and gradients with z_loss=0 are those of an objective without the key."""
    off = _step("clm", 0.0, CUTS)

    class Before(CausalLMObjective):
        def forward(self, model, batch):
            logits = model(batch["input_ids"], batch.get("attention_mask"))
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(),
                batch["labels"].flatten(),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            return {"tokens": loss}, logits

    objective, arch, _ = _case("clm", 0.0)
    before = _module(Before(pad_id=0), arch)
    torch.manual_seed(1)
    batch = objective.collate(_case("clm", 0.0)[2])
    micro = [{k: v[a:b] for k, v in batch.items()} for a, b in zip(CUTS, CUTS[1:], strict=False)]
    counted = [{**b, COUNTS: before.objective.counts(b)} for b in micro]
    before.training_step(counted, 0)
    assert torch.equal(off.step_loss(), before.step_loss())
    for got, want in zip(off.parameters(), before.parameters(), strict=True):
        assert torch.equal(got.grad, want.grad)


CLM = "xfmr.objectives.clm.CausalLMObjective"


@pytest.mark.parametrize("value", [-1e-4, float("nan")])
def test_a_negative_z_loss_is_refused_naming_the_key(value: float) -> None:
    with pytest.raises(UserError, match=r"objective\.z_loss=.* is not valid: use a number >= 0"):
        ObjectiveConfig.read({"_target_": CLM, "z_loss": value})
    with pytest.raises(ValueError, match=r"objective\.z_loss=.* must be >= 0"):
        CausalLMObjective(z_loss=value)


def test_an_objective_without_vocabulary_logits_refuses_z_loss() -> None:
    target = "xfmr.objectives.classification.ClassificationObjective"
    with pytest.raises(UserError, match=r"objective\.z_loss .* objective in \[.*'clm'.*\] takes"):
        ObjectiveConfig.read({"_target_": target, "z_loss": 1e-4})
    assert ObjectiveConfig.read({"_target_": CLM, "z_loss": 1e-4}).get("z_loss") == 1e-4


def test_a_tiny_run_logs_the_z_term_beside_the_loss(tmp_path: Path) -> None:
    import xfmr
    from helpers.runs import CORPUS, TINY

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    overrides = [
        *(o for o in TINY if not o.startswith("print_config")),
        "data=text",
        f"data.path={corpus}",
        "callbacks.text_sample=null",
        "trainer.log_every_n_steps=2",
        f"paths.cache_dir={tmp_path / '.cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "objective.z_loss=1e-4",
    ]
    run = xfmr.train(xfmr.compose(*overrides))
    assert run.status == "completed"
    rows = []
    for path in run.path.rglob("metrics.csv"):
        rows += list(csv.DictReader(path.open()))
    logged = [row for row in rows if row.get("train/z_loss")]
    assert logged, f"no train/z_loss among {sorted(rows[0]) if rows else 'no metrics.csv'}"
    for row in logged:
        z, loss = float(row["train/z_loss"]), float(row["train/loss"])
        assert 0 < z < 1e-2 * loss  # the weighted term: 1e-4 * log(Z)^2, a part of the loss
