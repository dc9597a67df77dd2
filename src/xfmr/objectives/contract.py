"""What an objective is, in one place: what it declares and what it does.

An objective is one Python file holding a subclass of `Objective`, and one config file,
conf/objective/NAME.yaml, whose `_target_` names the class. Nothing else is edited to add one:
the config group is the registry (`xfmr.objectives.registry`), and everything that trains or
uses a run talks to the objective through the methods below (docs/objectives.md, "Adding an
objective").

The class body declares, as literals, since the config check reads them from the source
without importing torch (`xfmr.declared`)::

    name        its config name (conf/objective/NAME.yaml)
    archs       the architectures it can train
    reads       the kind of examples it reads (`xfmr.kinds`); the data group must give it
    segments    the segment (token type) embeddings it needs: 2 for sentences A and B, else 0
    heads       the choices of its `objective.head` key, if it has one
    required_special_tokens   tokens it needs the tokenizer to have
    uses_labels               takes the data's label set (`bind_labels`)
    by_perplexity             its loss is a mean over tokens, so exp(loss) is a perplexity
    loss_terms  the names of its loss's terms, each averaged over its own count (`counts`)

Its loss is returned as sums (`xfmr.objectives.terms`): `forward` gives, per term, the sum of
the per-target losses over the batch, and `counts` how many targets the term averages over.
xfmr divides by the counts of everything one loss stands for: every micro-batch of an optimizer
step on every process in training (gradient accumulation, DDP), the whole split in validation.
A `forward` that returns one scalar, the mean over its one term's counted targets, still works:
it is taken as that mean (sum = mean * count).

An objective whose head gives vocabulary logits scored by token cross-entropy (clm, mlm, mlm_nsp,
seq2seq, span_corruption) takes `objective.z_loss`, PaLM's z-loss weight
(`xfmr.objectives.common.z_loss_sum`), as the keyword `z_loss`, kept as `self.z_loss`; > 0 adds
the auxiliary term Z_LOSS to its `forward` (`common.token_terms`) and to `counts`, counted as its
cross-entropy's term (`z_loss_term`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torchmetrics import Metric
from torchmetrics.text import Perplexity

from xfmr.kinds import KINDS
from xfmr.nn import ModelConfig, build_model
from xfmr.nn.config import ARCHS
from xfmr.objectives.common import IGNORE_INDEX, Z_LOSS

if TYPE_CHECKING:
    from xfmr.text.tokenizers import TextTokenizer

Batch = dict[str, torch.Tensor]
PAD_TOKENS = ("<pad>", "[PAD]")


@dataclass(frozen=True)
class TextTask:
    """How a trained model reads text and writes it back (xfmr-generate, xfmr-eval's BLEU).

    Args:
        kind: "continue" (causal LM), "translate" (encoder-decoder) or "fill_masks" (MLM).
        pad_id: fills rows up to the batch's longest (masked out).
        eos_id: ends a hypothesis (None: only generation.max_new_tokens does).
        decoder_start_id: the encoder-decoder's first decoder token.
        source_suffix: ids appended to every input (seq2seq's </s>).
        hidden_ids: ids left out of the text printed (special tokens).
        mask_id: the [MASK] id an MLM encoder fills.
    """

    kind: str
    pad_id: int
    eos_id: int | None = None
    decoder_start_id: int | None = None
    source_suffix: tuple[int, ...] = ()
    hidden_ids: frozenset[int] = frozenset()
    mask_id: int | None = None


class Objective:
    """The base of every objective: the declarations above, and what a batch becomes.

    Subclasses implement `collate` and `forward`; the rest have the defaults of a token-level
    objective on the plain model (`xfmr.nn.build_model`, perplexity, no text).
    """

    name: ClassVar[str]
    archs: ClassVar[tuple[str, ...]]
    reads: ClassVar[str]
    segments: ClassVar[int] = 0
    heads: ClassVar[tuple[str, ...]] = ()
    required_special_tokens: ClassVar[tuple[str, ...]] = ()
    uses_labels: ClassVar[bool] = False
    by_perplexity: ClassVar[bool] = True
    loss_terms: ClassVar[tuple[str, ...]] = ("tokens",)
    packs: ClassVar[bool] = False  # `pack` lays a batch's examples into shared rows
    # PaLM's z-loss weight: set from the keyword `z_loss` by the objectives that take it.
    z_loss: float = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [n for n in ("name", "archs", "reads") if not hasattr(cls, n)]
        if missing:
            raise TypeError(f"objective {cls.__name__} does not declare {missing}")
        if cls.reads not in KINDS:
            raise TypeError(f"{cls.__name__}.reads={cls.reads!r}: use one of {list(KINDS)}")
        if not cls.archs or not set(cls.archs) <= set(ARCHS):
            raise TypeError(f"{cls.__name__}.archs={cls.archs!r}: use some of {list(ARCHS)}")

    # --- built once the tokenizer and the data are known ---------------------------------------

    def bind(self, tokenizer: TextTokenizer) -> None:
        """Take the ids it needs from the run's tokenizer (special tokens, vocabulary size)."""

    def bind_labels(self, label_names: list[str]) -> None:
        """Take the data's label set (objectives with `uses_labels`)."""
        raise TypeError(f"objective={self.name} takes no label set")

    def build_model(self, config: ModelConfig) -> nn.Module:
        """The model it trains: the plain model, or one with its task head."""
        return build_model(config)

    # --- training and validation ---------------------------------------------------------------

    def collate(self, examples: list[Any]) -> Batch:
        """A list of examples of the kind it `reads` -> a batch with `labels`
        (IGNORE_INDEX where nothing counts)."""
        raise NotImplementedError

    def pack(self, batch: Batch) -> Batch:
        """The collated `batch` with its examples packed into shared rows (`data.packing`;
        `xfmr.objectives.packing`), for the objectives that declare `packs`."""
        raise TypeError(f"objective={self.name} does not pack its batches")

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """How many targets each loss term averages over in `batch`, a 0-d integer tensor per
        term of `loss_terms`; by default the labels that count (not IGNORE_INDEX). Called on
        the host right after collating, and on the device."""
        if len(self.loss_terms) != 1:
            raise NotImplementedError(f"objective {self.name} must count each of its loss terms")
        (term,) = self.loss_terms
        return z_loss_term({term: (batch["labels"] != IGNORE_INDEX).sum()}, self.z_loss, of=term)

    def forward(self, model: nn.Module, batch: Batch) -> tuple[dict[str, torch.Tensor], Any]:
        """({term: the SUM of its per-target losses over the batch}, logits); the terms are
        `loss_terms`, each divided by its count (`counts`) of the whole optimizer step."""
        raise NotImplementedError

    def metrics(self) -> dict[str, Metric]:
        """Validation metrics, fresh; logged as val/NAME."""
        return {"ppl": Perplexity(ignore_index=IGNORE_INDEX)}

    def update_metrics(self, metrics: nn.ModuleDict, logits: torch.Tensor, batch: Batch) -> None:
        """Feed one validation batch's logits to `metrics` (those `metrics` made)."""
        metrics["ppl"].update(logits.float(), batch["labels"])

    # --- using a trained run -------------------------------------------------------------------

    def text_task(self, tokenizer: TextTokenizer) -> TextTask | None:
        """How a model it trained writes text; None: it writes none (a classifier)."""
        return None


def z_loss_term(counts: dict[str, torch.Tensor], z_loss: float, *, of: str) -> Batch:
    """`counts`, with the z-loss term's where `z_loss` > 0: the count of the term `of`, the
    cross-entropy over whose tokens it is summed, so that both divide by one count."""
    return {**counts, Z_LOSS: counts[of]} if z_loss else counts


def padding_id(tokenizer: TextTokenizer) -> int:
    """The tokenizer's padding token if it has one; else id 0, which the attention mask hides."""
    for token in PAD_TOKENS:
        if (token_id := tokenizer.token_to_id(token)) is not None:
            return token_id
    return 0
