"""Text in, text out for a loaded run: what its model makes of an input depends on how it was
trained. A causal LM continues a prompt; an encoder-decoder writes a target for a source
(seq2seq: source + </s>, decoding from <s>; span corruption, T5: decoding from <pad>); an MLM
encoder fills each [MASK] with its most likely token."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import torch

from xfmr.errors import UserError
from xfmr.generation import GenerationConfig, Hypothesis, generate
from xfmr.nn.positions import PositionScheme
from xfmr.objectives.common import pad_rows
from xfmr.objectives.contract import TextTask
from xfmr.runs.loading import LoadedRun

log = logging.getLogger("xfmr")

SUPPORTED = (
    "objective=clm (arch=decoder, rnn), seq2seq or span_corruption (encoder_decoder), mlm or "
    "mlm_nsp (encoder)"
)


def text_task(run: LoadedRun) -> TextTask:
    """How the run's objective writes text (its `text_task`); a run that writes none (a
    classifier) is a UserError."""
    task = run.objective.text_task(run.tokenizer)
    if task is None:
        raise UserError(
            f"run_dir={str(run.files.run_dir)!r} was trained with objective="
            f"{run.objective.name} on arch={run.model_config.arch}, which writes no text; text "
            f"comes from runs of {SUPPORTED}"
        )
    return task


def position_limit(model: torch.nn.Module) -> int | None:
    """The most positions the model's tables hold (learned, sinusoidal); None: no table."""
    limits = [
        m.max_positions
        for m in model.modules()
        if isinstance(m, PositionScheme) and isinstance(getattr(m, "max_positions", None), int)
    ]
    return min(limits) if limits else None


def input_limit(run: LoadedRun) -> tuple[int | None, str]:
    """The most tokens one input may hold, and why: the position table, or the block size the
    model was trained on, whichever is shorter."""
    limits = []
    table = position_limit(run.model)
    if table is not None:
        limits.append((table, f"model.pos.max_positions={table} (pos={run.model_config.pos.name})"))
    block_size = run.config.data.get("block_size")
    if block_size:
        limits.append(
            (int(block_size), f"data.block_size={block_size}, the length it was trained on")
        )
    return min(limits) if limits else (None, "")


def encode_inputs(
    run: LoadedRun, task: TextTask, texts: Sequence[str], names: Sequence[str]
) -> list[list[int]]:
    """Token ids per input (with the task's suffix); an empty input, one over the limit or,
    for an MLM, one without [MASK] is a UserError naming it (`names`: "input", "FILE:LINE")."""
    limit, reason = input_limit(run)
    rows = []
    for text, name, ids in zip(texts, names, run.tokenizer.encode_batch(list(texts)), strict=True):
        row = [*ids, *task.source_suffix]
        if not ids:
            raise UserError(f"{name} is empty: give some text")
        if limit is not None and len(row) > limit:
            raise UserError(
                f"{name} ({preview(text)}) is {len(row)} tokens long"
                f"{' with </s>' if task.source_suffix else ''}, more than the {limit} that "
                f"{reason} allows: shorten it"
            )
        if task.kind == "fill_masks" and task.mask_id not in row:
            raise UserError(
                f"{name} ({preview(text)}) has no [MASK]: an MLM encoder fills masked "
                "tokens, e.g. input='the cat [MASK] on the mat'"
            )
        rows.append(row)
    return rows


def preview(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def check_new_tokens(run: LoadedRun, task: TextTask, rows: list[list[int]], new: int) -> None:
    """The positions decoding feeds the model fit its table: the prompt (decoder) or the start
    token (encoder-decoder), then every new token but the last, which is never fed back."""
    table = position_limit(run.model)
    if table is None or task.kind == "fill_masks":
        return
    used = max(map(len, rows)) if task.kind == "continue" else 1
    if used + new - 1 > table:
        what = "the longest input's" if task.kind == "continue" else "the decoder start's"
        raise UserError(
            f"generation.max_new_tokens={new} after {what} {used} tokens needs "
            f"{used + new - 1} positions, more than model.pos.max_positions={table}: set "
            f"generation.max_new_tokens<={table - used + 1}"
        )


def warn_past_training_length(
    run: LoadedRun, task: TextTask, rows: list[list[int]], new: int
) -> None:
    """Positions within the table but past the length the model was trained on are allowed,
    with one warning: a learned table's rows there were never trained, and the other schemes
    extrapolate (often poorly)."""
    scheme = run.model_config.pos.name
    trained, key = trained_length(run)
    if task.kind == "fill_masks" or trained is None or run.model_config.arch == "rnn":
        return
    used = max(map(len, rows)) if task.kind == "continue" else 1
    needed = used + new - 1
    if needed <= trained:
        return
    what = "the longest input's" if task.kind == "continue" else "the decoder start's"
    effect = (
        "pos=learned positions past it were never trained, so the text there is unreliable"
        if scheme == "learned"
        else f"pos={scheme} extrapolates past it, often poorly"
    )
    log.warning(
        "warning: generation.max_new_tokens=%d after %s %d tokens runs to %d positions, past "
        "the %d the model was trained on (%s=%d): %s; generation.max_new_tokens<=%d stays within",
        new,
        what,
        used,
        needed,
        trained,
        key,
        trained,
        effect,
        max(trained - used + 1, 0),
    )


def fitted_new_tokens(run: LoadedRun, task: TextTask, rows: list[list[int]]) -> int:
    """`generation.max_new_tokens=null`: as many new tokens as reach the length the model was
    trained on after the longest input (a decoder) or the start token (an encoder-decoder),
    and at least one (an input already that long gets the warning); 64, within the position
    table, where the run names no length (an RNN, an MLM filling masks)."""
    trained, _ = trained_length(run)
    used = max(map(len, rows)) if task.kind == "continue" else 1
    if trained is not None and task.kind != "fill_masks" and run.model_config.arch != "rnn":
        return max(trained - used + 1, 1)
    table = position_limit(run.model)
    return 64 if table is None or task.kind == "fill_masks" else max(min(64, table - used + 1), 1)


def trained_length(run: LoadedRun) -> tuple[int | None, str]:
    """The longest sequence the model was trained on, and the key that set it."""
    for key in ("block_size", "max_length"):
        if run.config.data.get(key):
            return int(run.config.data.get(key)), f"data.{key}"
    return None, ""


@torch.no_grad()
def generate_rows(
    run: LoadedRun,
    task: TextTask,
    rows: list[list[int]],
    *,
    config: GenerationConfig,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[Hypothesis]]:
    """Hypotheses for each row of ids, decoded `batch_size` rows at a time (rows of similar
    length together: batching does not change what `generate` returns for a row)."""
    if config.max_new_tokens is None:
        config = dataclasses.replace(config, max_new_tokens=fitted_new_tokens(run, task, rows))
    check_new_tokens(run, task, rows, config.max_new_tokens)
    warn_past_training_length(run, task, rows, config.max_new_tokens)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    results: list[list[Hypothesis]] = [[] for _ in rows]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids, mask = pad_rows([rows[i] for i in chunk], task.pad_id)  # (B, T) each
        try:
            hypotheses = generate(
                run.model,
                ids.to(run.device),
                mask.to(run.device),
                config=config,
                eos_id=task.eos_id,
                pad_id=task.pad_id,
                decoder_start_id=task.decoder_start_id,
                max_positions=position_limit(run.model),
                vocab_size=run.tokenizer.vocab_size,
            )
        except ValueError as e:  # the settings against this model, e.g. positions exhausted
            raise UserError(str(e)) from None
        for i, row_hypotheses in zip(chunk, hypotheses, strict=True):
            results[i] = row_hypotheses
        if on_batch is not None:
            on_batch(len(chunk))
    return results


def hypothesis_text(run: LoadedRun, task: TextTask, row: list[int], hypothesis: Hypothesis) -> str:
    """A hypothesis as text: the prompt and its continuation (causal LM), or the target alone
    with special tokens removed (encoder-decoder)."""
    ids = [*row, *hypothesis.tokens] if task.kind == "continue" else hypothesis.tokens
    return decode_visible(run, ids, task.hidden_ids)


def decode_visible(run: LoadedRun, ids: Sequence[int], hidden: frozenset[int]) -> str:
    return run.tokenizer.decode([i for i in ids if i not in hidden]).strip()


@torch.no_grad()
def fill_masks(
    run: LoadedRun, task: TextTask, rows: list[list[int]], *, batch_size: int
) -> list[str]:
    """Each input with every [MASK] replaced by the encoder's most likely token (special
    tokens, and the ids past the tokenizer's that a padded vocabulary adds, excluded),
    predicted for all masks at once from the input as given."""
    specials = torch.tensor(sorted(run.tokenizer.special_ids()), dtype=torch.long)
    filled: list[str] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        ids, mask = pad_rows(chunk, task.pad_id)  # (B, T) each
        output = run.model(ids.to(run.device), mask.to(run.device))
        logits = (output[0] if isinstance(output, tuple) else output).float()  # (B, T, V)
        logits[..., specials.to(logits.device)] = float("-inf")
        logits[..., run.tokenizer.vocab_size :] = float("-inf")  # model.vocab_multiple's rows
        best = logits.argmax(-1).cpu()  # (B, T)
        predicted = torch.where(ids == task.mask_id, best, ids)
        for row, row_ids in zip(chunk, predicted, strict=True):
            filled.append(decode_visible(run, row_ids[: len(row)].tolist(), task.hidden_ids))
    return filled


def generate_texts(
    run: LoadedRun,
    texts: Sequence[str],
    names: Sequence[str],
    *,
    config: GenerationConfig,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[str]]:
    """What the run writes for each input (`names` name them in messages): its n_best
    hypotheses, best first, or (an MLM encoder) the input with each [MASK] filled."""
    task = text_task(run)
    rows = encode_inputs(run, task, list(texts), list(names))
    if task.kind == "fill_masks":
        filled = fill_masks(run, task, rows, batch_size=batch_size)
        if on_batch is not None:
            on_batch(len(rows))
        return [[text] for text in filled]
    hypotheses = generate_rows(
        run, task, rows, config=config, batch_size=batch_size, on_batch=on_batch
    )
    return [
        [hypothesis_text(run, task, row, h) for h in row_hypotheses]
        for row, row_hypotheses in zip(rows, hypotheses, strict=True)
    ]
