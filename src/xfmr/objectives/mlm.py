"""Masked language modelling (Devlin et al. 2019, sec. 3.1): select 15% of the tokens, replace
80% of those with [MASK], 10% with a random token, keep 10%; predict the originals."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.objectives.archs import OBJECTIVE_ARCHS
from xfmr.objectives.clm import IGNORE_INDEX, token_loss


def mask_tokens(
    ids: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    special_ids: torch.Tensor,
    select_rate: float = 0.15,
    mask_rate: float = 0.8,
    random_rate: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids -> (corrupted ids, labels); labels are IGNORE_INDEX except at selected tokens.

    Specials (padding included) are never selected; random replacements are never specials.
    """
    selectable = ~torch.isin(ids, special_ids)
    draw = torch.rand(ids.shape, generator=generator)
    selected = (draw < select_rate) & selectable
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    # One more uniform draw decides the replacement of each selected token.
    how = torch.rand(ids.shape, generator=generator)
    to_mask = selected & (how < mask_rate)
    to_random = selected & (how >= mask_rate) & (how < mask_rate + random_rate)
    normal = torch.ones(vocab_size)
    normal[special_ids] = 0.0
    random_ids = torch.multinomial(normal, ids.numel(), replacement=True, generator=generator)
    corrupted = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    corrupted = torch.where(to_random, random_ids.view_as(ids), corrupted)
    return corrupted, labels


class MaskedLMObjective:
    """BERT's masked-LM objective on blocks of text; rates are configurable.

    The tokenizer gets `[MASK]` as a special token; ids are bound once it exists.
    """

    name = "mlm"
    supported_archs = OBJECTIVE_ARCHS["MaskedLMObjective"]
    required_special_tokens = ("[MASK]",)

    def __init__(
        self, *, select_rate: float = 0.15, mask_rate: float = 0.8, random_rate: float = 0.1
    ) -> None:
        if not 0.0 < select_rate < 1.0:
            raise ValueError(f"objective.select_rate={select_rate} must lie in (0, 1)")
        if mask_rate < 0 or random_rate < 0 or mask_rate + random_rate > 1.0:
            raise ValueError(
                f"objective.mask_rate={mask_rate} and objective.random_rate={random_rate} must be "
                f">= 0 with a sum <= 1 (the rest of the selected tokens stay unchanged)"
            )
        self.select_rate = select_rate
        self.mask_rate = mask_rate
        self.random_rate = random_rate
        self.mask_id: int | None = None
        self.vocab_size: int | None = None
        self.special_ids: torch.Tensor | None = None

    def bind(self, tokenizer) -> None:
        self.mask_id = tokenizer.token_to_id("[MASK]")
        self.vocab_size = tokenizer.vocab_size
        self.special_ids = torch.tensor(sorted(tokenizer.special_ids()), dtype=torch.long)

    def collate(self, blocks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = torch.stack(blocks)[:, :-1]  # (B, T): blocks carry one extra token for CLM
        corrupted, labels = mask_tokens(
            ids,
            mask_id=self.mask_id,
            vocab_size=self.vocab_size,
            special_ids=self.special_ids,
            select_rate=self.select_rate,
            mask_rate=self.mask_rate,
            random_rate=self.random_rate,
        )
        return {"input_ids": corrupted, "labels": labels}

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(batch["input_ids"], batch.get("attention_mask"))
        loss = token_loss(logits, batch["labels"])
        return loss, logits
