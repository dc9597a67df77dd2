"""Attention maps of one input: every layer's and head's attention probabilities, recorded by
`xfmr.nn.attention.record_attention` during one forward pass and drawn as heatmaps with the
tokens on both axes. An encoder-decoder is run over its own greedy output, so its decoder self-
and cross-attention show how it wrote that output."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from xfmr.errors import UserError
from xfmr.generation import GenerationConfig
from xfmr.nn.attention import record_attention
from xfmr.objectives.contract import TextTask
from xfmr.runs.inference import encode_inputs, generate_rows, text_task
from xfmr.runs.loading import LoadedRun


@dataclass
class AttentionMap:
    """One head's attention (queries x keys) with the tokens on each axis."""

    layer: str
    kind: str  # "self" | "cross"
    head: int
    weights: torch.Tensor  # (T, S), rows sum to 1
    queries: list[str]
    keys: list[str]

    @property
    def file_name(self) -> str:
        return f"{self.layer}-{self.kind}-head{self.head}.png"

    def figure(self) -> Any:
        """This map as a heatmap (a matplotlib Figure; a notebook shows it)."""
        return heatmap(self)


@torch.no_grad()
def attention_maps(run: LoadedRun, text: str, *, config: GenerationConfig) -> list[AttentionMap]:
    """The maps of every attention call of one forward pass over `text` (and, for an
    encoder-decoder, over its greedy output for `text`)."""
    arch = run.model_config.arch
    if arch == "rnn":
        raise UserError("arch=rnn has no attention to draw: use a run of a transformer arch")
    if arch == "encoder_decoder":
        task = text_task(run)
        [source] = encode_inputs(run, task, [text], ["input"])
        greedy = replace(config, strategy="greedy", n_best=1)
        [[best]] = generate_rows(run, task, [source], config=greedy, batch_size=1)
        target = [task.decoder_start_id, *best.tokens]
        source_ids, target_ids = _tensor(run, source), _tensor(run, target)
        with record_attention(run.model) as records:
            run.model(
                source_ids, torch.ones_like(source_ids), target_ids, torch.ones_like(target_ids)
            )
    else:  # one stream: a causal LM or an encoder (an MLM or a classifier)
        [source] = encode_inputs(run, TextTask("continue", pad_id=0), [text], ["input"])
        target = source
        ids = _tensor(run, source)
        with record_attention(run.model) as records:
            run.model(ids, torch.ones_like(ids))
    source_tokens, target_tokens = token_labels(run, source), token_labels(run, target)
    maps = []
    for record in records:
        on_target = arch == "encoder_decoder" and not record.layer.startswith("encoder")
        queries = target_tokens if on_target else source_tokens
        keys = source_tokens if record.kind == "cross" or not on_target else target_tokens
        for head in range(record.weights.size(1)):
            weights = record.weights[0, head].float().cpu()  # (T, S)
            maps.append(AttentionMap(record.layer, record.kind, head, weights, queries, keys))
    return maps


def _tensor(run: LoadedRun, ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long, device=run.device)  # (1, T)


def token_labels(run: LoadedRun, ids: list[int]) -> list[str]:
    """Each token's own string; whitespace made visible and `$` kept out of mathtext."""
    vocab = run.tokenizer.tokenizer
    labels = []
    for token_id in ids:
        token = vocab.id_to_token(token_id) or str(token_id)
        labels.append(token.replace("\n", "\\n").replace(" ", "␣").replace("$", r"\$"))
    return labels


def save_heatmaps(maps: list[AttentionMap], out_dir: Path) -> list[Path]:
    """One PNG per map in `out_dir` (made if needed); returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for attention in maps:
        path = out_dir / attention.file_name
        heatmap(attention).savefig(path, dpi=80)
        written.append(path)
    return written


def heatmap(attention: AttentionMap) -> Any:
    """One head's map as a matplotlib Figure, tokens on both axes. A Figure of its own, not
    pyplot's: drawing needs no display and leaves a notebook's plotting backend as it was."""
    from matplotlib.figure import Figure

    rows, cols = attention.weights.shape
    inches = min(20.0, 2.5 + 0.22 * max(rows, cols))
    figure = Figure(figsize=(inches + 1.0, inches))
    axes = figure.subplots()
    image = axes.imshow(attention.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(cols), labels=attention.keys, rotation=90, fontsize=8)
    axes.set_yticks(range(rows), labels=attention.queries, fontsize=8)
    axes.set_xlabel("key")
    axes.set_ylabel("query")
    axes.set_title(f"{attention.layer} ({attention.kind}-attention), head {attention.head}")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    return figure
