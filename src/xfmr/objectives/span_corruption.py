"""T5's span corruption (Raffel et al. 2020, sec. 3.1.4): drop ~15% of the tokens in spans of
mean length 3; the input keeps the rest with one sentinel per dropped span, the target lists
each sentinel followed by its span and ends with a final sentinel and </s>.

Packed (`data.packing`; a text corpus's blocks come with their documents,
`xfmr.objectives.packing.text_blocks`), each document's piece of a block is an example of its
own, as in T5's pre-processing (chunk, corrupt, then pack): corrupted alone, its input and
target laid side by side with the others' in the block's row, its decoder attending within its
own target and across to its own input only (`document_ids`, `decoder_document_ids`)."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.objectives.common import (
    IGNORE_INDEX,
    checked_z_loss,
    encoder_decoder_logits,
    pad_rows,
    token_terms,
)
from xfmr.objectives.contract import Objective, TextTask
from xfmr.objectives.packing import PADDING_DOCUMENT, packed_text, text_blocks


def sentinel(index: int) -> str:
    return f"<extra_id_{index}>"


def _random_partition(total: int, parts: int, generator: torch.Generator | None) -> list[int]:
    """`total` split into `parts` positive lengths, uniformly over such splits."""
    cuts = torch.randperm(total - 1, generator=generator)[: parts - 1].add(1).sort().values.tolist()
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:], strict=False)]


def noise_spans(
    length: int,
    *,
    noise_density: float,
    mean_span_length: float,
    generator: torch.Generator | None = None,
) -> list[tuple[int, int]]:
    """[(start, end), ...] of the dropped spans: round(length * density) tokens in
    round(noise / mean_span_length) spans, kept and dropped runs alternating (T5's
    random_spans_noise_mask), starting with a kept run."""
    n_noise = min(max(1, round(length * noise_density)), length - 1)
    n_spans = max(1, round(n_noise / mean_span_length))
    n_spans = min(n_spans, n_noise, length - n_noise)
    noise = _random_partition(n_noise, n_spans, generator)
    keep = _random_partition(length - n_noise, n_spans, generator)
    spans, position = [], 0
    for kept, dropped in zip(keep, noise, strict=True):
        position += kept
        spans.append((position, position + dropped))
        position += dropped
    return spans


def corrupt(
    ids: list[int], spans: list[tuple[int, int]], sentinel_ids: list[int], eos_id: int
) -> tuple[list[int], list[int]]:
    """(input, target) for one sequence; span k becomes sentinel k."""
    if len(spans) >= len(sentinel_ids):
        raise ValueError(
            f"{len(spans)} spans need more than objective.n_sentinels={len(sentinel_ids)} sentinels"
        )
    source, target, previous = [], [], 0
    for k, (start, end) in enumerate(spans):
        source += [*ids[previous:start], sentinel_ids[k]]
        target += [sentinel_ids[k], *ids[start:end]]
        previous = end
    source += ids[previous:]
    target += [sentinel_ids[len(spans)], eos_id]
    return source, target


def document_pieces(ids: list[int], documents: list[int]) -> list[list[int]]:
    """A packed block's ids split where its document changes: each document's piece."""
    pieces: list[list[int]] = []
    for position, (token, document) in enumerate(zip(ids, documents, strict=True)):
        if position == 0 or document != documents[position - 1]:
            pieces.append([])
        pieces[-1].append(token)
    return pieces


class SpanCorruptionObjective(Objective):
    """Span corruption on blocks of text for an encoder-decoder; decoder inputs are the targets
    shifted right behind a start token (<pad>, as in T5).

    Args:
        noise_density, mean_span_length: the fraction of tokens dropped, in spans of this mean.
        n_sentinels: the sentinels <extra_id_k> the tokenizer gets: more than the spans.
        z_loss: PaLM's z-loss weight (`common.z_loss_sum`; PaLM: 1e-4), 0: off.
    """

    name = "span_corruption"
    # Spans are written out by a decoder that reads the corrupted input: an encoder-decoder.
    archs = ("encoder_decoder",)
    reads = "text"
    packs = True  # blocks of documents (data.packing): see `collate`

    def __init__(
        self,
        *,
        noise_density: float = 0.15,
        mean_span_length: float = 3.0,
        n_sentinels: int = 100,
        z_loss: float = 0.0,
    ) -> None:
        if not 0.0 < noise_density < 1.0:
            raise ValueError(f"objective.noise_density={noise_density} must lie in (0, 1)")
        if mean_span_length < 1:
            raise ValueError(f"objective.mean_span_length={mean_span_length} must be >= 1")
        self.noise_density = noise_density
        self.mean_span_length = mean_span_length
        self.n_sentinels = n_sentinels
        self.z_loss = checked_z_loss(z_loss)
        self.required_special_tokens = ("<pad>", "</s>", *(sentinel(i) for i in range(n_sentinels)))
        self.pad_id = self.eos_id = None
        self.sentinel_ids: list[int] = []

    def bind(self, tokenizer) -> None:
        self.pad_id = tokenizer.token_to_id("<pad>")
        self.eos_id = tokenizer.token_to_id("</s>")
        self.sentinel_ids = [tokenizer.token_to_id(sentinel(i)) for i in range(self.n_sentinels)]

    def collate(self, blocks: list) -> dict[str, torch.Tensor]:
        """Blocks (T + 1 ids each; the last is CLM's and unused) -> corrupted inputs, decoder
        inputs and targets. Packed blocks (ids and their documents, `data.packing`): each
        document's piece of a block corrupted alone, side by side in the block's row."""
        ids, documents = text_blocks(blocks)  # (B, T + 1) each
        rows = ids[:, :-1].tolist()
        if documents is None:
            return self.corrupted([[row] for row in rows])
        documents = documents[:, :-1].tolist()
        return self.corrupted(
            [document_pieces(row, of) for row, of in zip(rows, documents, strict=True)],
            packed=True,
        )

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return packed_text(batch)

    def corrupted(self, rows: list[list[list[int]]], *, packed: bool = False) -> dict:
        """Rows of examples (token ids) -> the batch (`_row`); `packed`: with each token's
        example, numbered from 0 in its row, in `document_ids` and `decoder_document_ids`."""
        sources, targets, shifted, source_of, target_of = zip(*map(self._row, rows), strict=True)
        input_ids, attention_mask = pad_rows(sources, self.pad_id)
        labels, decoder_mask = pad_rows(targets, self.pad_id)
        decoder_input_ids, _ = pad_rows(shifted, self.pad_id)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_mask,
            "labels": labels.masked_fill(decoder_mask == 0, IGNORE_INDEX),
        }
        if packed:
            batch["document_ids"] = pad_rows(source_of, PADDING_DOCUMENT)[0]
            batch["decoder_document_ids"] = pad_rows(target_of, PADDING_DOCUMENT)[0]
        return batch

    def _row(self, examples: list[list[int]]) -> tuple[list[int], ...]:
        """One row's examples, each corrupted alone (its spans drawn in order), side by side:
        (inputs, targets, decoder inputs: each target shifted right behind <pad>, the example
        of each input token, the example of each target token)."""
        row: tuple[list[int], ...] = ([], [], [], [], [])
        for number, example in enumerate(examples):
            source, target = corrupt(
                example, self._spans(len(example)), self.sentinel_ids, self.eos_id
            )
            shifted = [self.pad_id, *target[:-1]]
            numbers = ([number] * len(source), [number] * len(target))
            for values, more in zip(row, (source, target, shifted, *numbers), strict=True):
                values += more
        return row

    def _spans(self, length: int) -> list[tuple[int, int]]:
        """The spans dropped from an example of `length` tokens; none from a one-token piece
        of a document (its target is then the final sentinel and </s>)."""
        if length < 2:
            return []
        return noise_spans(
            length, noise_density=self.noise_density, mean_span_length=self.mean_span_length
        )

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        logits = encoder_decoder_logits(model, batch)
        return token_terms(logits, batch["labels"], z_loss=self.z_loss), logits

    def text_task(self, tokenizer) -> TextTask | None:
        """T5 (Raffel et al. 2020): the decoder starts at <pad>; sentinels stay in the output."""
        return TextTask(
            "translate",
            pad_id=self.pad_id,
            eos_id=self.eos_id,
            decoder_start_id=self.pad_id,
            hidden_ids=frozenset({self.pad_id, self.eos_id}),
        )
