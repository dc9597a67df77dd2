"""Masked language modelling (Devlin et al. 2019, sec. 3.1): select 15% of the tokens, replace
80% of those with [MASK], 10% with a random token, keep 10%; predict the originals.

With whole-word masking (BERT's 2019 release; Cui et al. 2019) the draws are made per word and
every piece of a selected word shares its word's selection and its 80/10/10 decision.
"""

from __future__ import annotations

import torch
from torch import nn

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import IGNORE_INDEX, checked_z_loss, token_terms
from xfmr.objectives.contract import Objective, TextTask, padding_id
from xfmr.objectives.packing import packed_text, text_blocks
from xfmr.text.tokenizers import WORD_MARKING_KINDS


def mask_tokens(
    ids: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    special_ids: torch.Tensor,
    select_rate: float = 0.15,
    mask_rate: float = 0.8,
    random_rate: float = 0.1,
    word_index: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids -> (corrupted ids, labels); labels are IGNORE_INDEX except at selected tokens.

    Specials (padding included) are never selected; random replacements are never specials.
    `word_index` (B, T), each token's word number in its row (see `number_words`), makes the
    selection and the replacement decision per word; a random replacement is still per piece.
    """
    selectable = ~torch.isin(ids, special_ids)
    draw = _per_word(torch.rand(ids.shape, generator=generator), word_index)
    selected = (draw < select_rate) & selectable
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    # One more uniform draw decides the replacement of each selected token (or word).
    how = _per_word(torch.rand(ids.shape, generator=generator), word_index)
    to_mask = selected & (how < mask_rate)
    to_random = selected & (how >= mask_rate) & (how < mask_rate + random_rate)
    normal = torch.ones(vocab_size)
    normal[special_ids] = 0.0
    random_ids = torch.multinomial(normal, ids.numel(), replacement=True, generator=generator)
    corrupted = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    corrupted = torch.where(to_random, random_ids.view_as(ids), corrupted)
    return corrupted, labels


def _per_word(draw: torch.Tensor, word_index: torch.Tensor | None) -> torch.Tensor:
    """One draw per token, or the draw of each token's word (words never outnumber tokens)."""
    return draw if word_index is None else draw.gather(1, word_index)


def word_tables(
    pieces: list[str], *, marker: str, marker_starts_word: bool, special_ids: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token id: (joins, open_end), bool (V,) each. A piece joins the word of the piece before
    it when it `joins` and that piece has an `open_end`.

    WordPiece (`marker_starts_word=False`): "##" pieces join, every piece is open. Metaspace "▁"
    and byte-level "Ġ": a piece joins unless it carries the marker or begins with neither a
    letter nor a digit (the pre-tokenizers split punctuation and whitespace off words); a piece
    is open when it ends in a letter or digit or is the bare marker. Specials do neither.
    """
    joins, open_end = [], []
    for piece in pieces:
        if marker_starts_word:
            joins.append(not piece.startswith(marker) and piece[:1].isalnum())
            open_end.append(piece[-1:].isalnum() or piece == marker)
        else:
            joins.append(piece.startswith(marker) and len(piece) > len(marker))
            open_end.append(True)
    joins_t, open_t = torch.tensor(joins), torch.tensor(open_end)
    joins_t[special_ids] = False
    open_t[special_ids] = False
    return joins_t, open_t


def number_words(ids: torch.Tensor, *, joins: torch.Tensor, open_end: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T) word numbers within each row (0, 1, ...); a row starts a word."""
    continues = joins[ids]  # (B, T)
    continues[:, 1:] &= open_end[ids[:, :-1]]
    continues[:, 0] = False
    return torch.cumsum(~continues, dim=1) - 1


class TokenMasker:
    """BERT's masking with the ids of a tokenizer (bound once it exists).

    Args:
        select_rate: fraction of tokens (words, with `whole_word`) selected for prediction.
        mask_rate: fraction of the selected replaced by [MASK].
        random_rate: fraction of the selected replaced by a random token; the rest stay.
        whole_word: select and replace whole words; the tokenizer's pieces must mark words.
    """

    def __init__(
        self,
        *,
        select_rate: float = 0.15,
        mask_rate: float = 0.8,
        random_rate: float = 0.1,
        whole_word: bool = False,
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
        self.whole_word = whole_word
        self.mask_id: int | None = None
        self.vocab_size: int | None = None
        self.special_ids: torch.Tensor | None = None
        self.word_tables: tuple[torch.Tensor, torch.Tensor] | None = None

    def bind(self, tokenizer) -> None:
        self.mask_id = tokenizer.token_to_id("[MASK]")
        self.vocab_size = tokenizer.vocab_size
        specials = sorted(tokenizer.special_ids())
        self.special_ids = torch.tensor(specials, dtype=torch.long)
        if not self.whole_word:
            return
        marker = tokenizer.word_marker()
        if marker is None:
            raise UserError(
                "objective.whole_word=true needs a tokenizer whose pieces mark words: tokenizer "
                f"in {list(WORD_MARKING_KINDS)} (WordPiece '##', Metaspace '▁', byte-level 'Ġ'), "
                "or a pretrained one of those; this tokenizer's pieces mark none (e.g. char)"
            )
        self.word_tables = word_tables(
            tokenizer.pieces(), marker=marker[0], marker_starts_word=marker[1], special_ids=specials
        )

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids -> (corrupted ids, labels)."""
        words = None
        if self.word_tables is not None:
            joins, open_end = self.word_tables
            words = number_words(ids, joins=joins, open_end=open_end)
        return mask_tokens(
            ids,
            mask_id=self.mask_id,
            vocab_size=self.vocab_size,
            special_ids=self.special_ids,
            select_rate=self.select_rate,
            mask_rate=self.mask_rate,
            random_rate=self.random_rate,
            word_index=words,
        )


class MaskedLMObjective(Objective):
    """BERT's masked-LM objective on blocks of text; rates are configurable.

    The tokenizer gets `[MASK]` as a special token; ids are bound once it exists.

    Args:
        head: "bert" (BERT's MLM head: dense, activation, norm, tied decoder and bias;
            `EncoderMaskedLM`) or "linear" (one projection tied to the embedding; `EncoderLM`).
        select_rate, mask_rate, random_rate, whole_word: see `TokenMasker`.
        z_loss: PaLM's z-loss weight (`common.z_loss_sum`; PaLM: 1e-4), 0: off.
    """

    name = "mlm"
    # Masked tokens are predicted from both sides: a bidirectional encoder.
    archs = ("encoder",)
    reads = "text"
    # objective.head: BERT's MLM head, or one tied linear projection.
    heads = ("bert", "linear")
    required_special_tokens = ("[MASK]",)
    packs = True  # blocks of documents (data.packing), each token attending within its own

    def __init__(
        self,
        *,
        head: str = "bert",
        select_rate: float = 0.15,
        mask_rate: float = 0.8,
        random_rate: float = 0.1,
        whole_word: bool = False,
        z_loss: float = 0.0,
    ) -> None:
        if head not in self.heads:
            raise ValueError(f"objective.head={head!r} is not one of {list(self.heads)}")
        self.head = head
        self.z_loss = checked_z_loss(z_loss)
        self.masker = TokenMasker(
            select_rate=select_rate,
            mask_rate=mask_rate,
            random_rate=random_rate,
            whole_word=whole_word,
        )

    def bind(self, tokenizer) -> None:
        self.masker.bind(tokenizer)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.encoder import EncoderLM
        from xfmr.nn.heads import EncoderMaskedLM

        return EncoderMaskedLM(config) if self.head == "bert" else EncoderLM(config)

    def collate(self, blocks: list) -> dict[str, torch.Tensor]:
        """Blocks -> masked inputs and labels; packed blocks (`data.packing`) keep
        `document_ids` (B, T)."""
        ids, documents = text_blocks(blocks)  # (B, T + 1): blocks carry one extra token for CLM
        corrupted, labels = self.masker(ids[:, :-1])
        batch = {"input_ids": corrupted, "labels": labels}
        if documents is not None:
            batch["document_ids"] = documents[:, :-1]
        return batch

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return packed_text(batch)

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        packed = {"document_ids": batch["document_ids"]} if "document_ids" in batch else {}
        logits = model(batch["input_ids"], batch.get("attention_mask"), **packed)
        return token_terms(logits, batch["labels"], z_loss=self.z_loss), logits

    def text_task(self, tokenizer) -> TextTask | None:
        return fill_masks(tokenizer)


def fill_masks(tokenizer) -> TextTask:
    """A masked LM's text: each [MASK] of the input filled with its most likely token."""
    return TextTask(
        "fill_masks",
        pad_id=padding_id(tokenizer),
        mask_id=tokenizer.token_to_id("[MASK]"),
        hidden_ids=frozenset(tokenizer.special_ids()),
    )
