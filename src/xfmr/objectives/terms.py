"""An objective's loss as sums over counted targets, so that it adds up across batches.

An objective's `forward` returns, per loss term, the SUM of the term's per-target losses over
the batch, and its `counts` the number of targets each term averages over (`Objective`). The
loss of any set of batches is then, term by term, the sum of the sums over the sum of the
counts, added over the terms: the loss of one batch holding them all. Gradient accumulation and
DDP divide by the counts of the whole optimizer step (`xfmr.training.module`), and validation
and xfmr-eval by those of the whole split (`TermLoss`), where a mean per batch would weight a
batch of few targets as much as one of many (mean of means).

An objective may return auxiliary terms beside its `loss_terms`, each with its own count: PaLM's
z-loss (`xfmr.objectives.common.token_terms`), counted over the tokens its cross-entropy
counts. Training optimises every term returned (`divided`), and logs each auxiliary term's part
of the step's loss as `train/TERM` (`xfmr.training.module.XfmrModule.step_terms`); the reported
loss, validation's and xfmr-eval's (`TermLoss`), is that of `loss_terms` alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torchmetrics import Metric

Terms = dict[str, torch.Tensor]


def loss_sums(name: str, loss: torch.Tensor | Mapping[str, torch.Tensor], counts: Terms) -> Terms:
    """What objective `name`'s forward returned, as a sum per term (the keys of `counts`).

    A plain scalar, what an objective written for an earlier contract returns, is taken as the
    mean over its one term's count: its sum is mean * count."""
    if isinstance(loss, Mapping):
        if loss.keys() != counts.keys():
            raise TypeError(
                f"objective {name}: forward returned loss terms {sorted(loss)}, but counts "
                f"gives {sorted(counts)}: they must be the same"
            )
        return dict(loss)
    if len(counts) != 1:
        raise TypeError(
            f"objective {name}: forward returned one loss, but its loss has the terms "
            f"{sorted(counts)}: return a sum per term"
        )
    ((term, count),) = counts.items()
    return {term: loss * count}


def auxiliary(terms: Iterable[str], reported: tuple[str, ...]) -> tuple[str, ...]:
    """The terms of `terms` that the reported loss (`reported`, an objective's `loss_terms`)
    leaves out."""
    return tuple(t for t in terms if t not in reported)


def divided(sums: Terms, totals: Terms) -> torch.Tensor:
    """sum over terms of sums[t] / totals[t]; a term with nothing counted adds 0, not NaN."""
    first, *rest = (sums[t].float() / totals[t].clamp(min=1) for t in sums)
    return sum(rest, first)  # from the first term: no 0 + tensor kernel on a one-term loss


class TermLoss(Metric):
    """The loss over every batch it is given, term by term (sum of sums / sum of counts, added
    over the terms); the states are sums, so DDP's sync adds the processes' together. Terms
    given beyond `terms` (auxiliary ones, PaLM's z-loss) are left out.

    Args:
        terms: the objective's loss terms (`Objective.loss_terms`).
    """

    full_state_update = False

    def __init__(self, terms: tuple[str, ...]) -> None:
        super().__init__()
        self.terms = tuple(terms)
        n = len(self.terms)
        # float32 sums, as torchmetrics' MeanMetric keeps (an MPS device has no float64);
        # whole-number counts stay exact past float32's 2^24.
        self.add_state("sums", default=torch.zeros(n), dist_reduce_fx="sum")
        self.add_state("counts", default=torch.zeros(n, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, sums: Terms, counts: Terms) -> None:
        self.sums += torch.stack([sums[t].detach().to(self.sums.dtype) for t in self.terms])
        self.counts += torch.stack([counts[t].to(self.counts.dtype) for t in self.terms])

    def compute(self) -> torch.Tensor:
        return (self.sums / self.counts.clamp(min=1)).sum()
