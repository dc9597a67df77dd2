"""A run as a folder Hugging Face `transformers` loads without xfmr (xfmr-export format=hf):
config.json and model.safetensors under the HF class's names, generation_config.json where the
model generates, the tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json)
and a model card, README.md, written from the run.

The mapping is `xfmr.interop`'s; this module adds what the run knows: the objective's special
tokens and input layout, the labels, the data, the steps and the final metrics. The folder is
filled beside `out` and renamed into place, so a killed export leaves nothing that looks
complete; a model no HF class represents is refused before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.files import atomic_dir
from xfmr.interop.hf_export import hf_family, to_hf
from xfmr.interop.hf_families import Family
from xfmr.interop.hf_tokenizer import Template, hf_tokenizer
from xfmr.run_dir.files import HF_MODEL_CARD_FILE, RESULTS_FILE, read_labels
from xfmr.runs.inference import position_limit
from xfmr.runs.loading import LoadedRun, load_run
from xfmr.targets import plain

# objective name -> what `tokenizer(text)` adds around the pieces: the layout the objective
# fed the model. Objectives not named take the text as it is (clm, mlm, mlm_nsp: xfmr-generate
# and fill-mask read raw text). Classification gives both texts segment 0, as it trains.
TEMPLATES = {
    "classification": Template("[CLS] $A [SEP]", "[CLS] $A [SEP] $B [SEP]"),
    "tagging": Template("[CLS] $A [SEP]"),
    "qa": Template("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1"),
    "seq2seq": Template("$A </s>"),
    "span_corruption": Template("$A </s>"),
}


def export_hf(run_dir: str | Path, out: Path, *, checkpoint: str | None = None) -> dict[str, Any]:
    """Write the run's model, tokenizer and model card to the folder `out`, which must not
    exist (or be empty). Returns the HF class, the folder and the files written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"out={str(out)!r} already exists and is not an empty folder: give a new folder "
            "(format=hf writes a whole folder)"
        )
    run = load_run(run_dir, checkpoint=checkpoint)
    try:
        family = hf_family(run.model)
    except ValueError as e:
        raise UserError(f"format=hf: {e}") from None
    hf_model = to_hf(run.model, family, **_token_ids(run), **_labels(run))
    _generation(hf_model, run)
    tokenizer = hf_tokenizer(
        run.tokenizer,
        template=TEMPLATES.get(run.objective.name),
        max_length=position_limit(run.model),
        segments=run.model_config.arch == "encoder",
    )
    if out.is_dir():
        out.rmdir()  # empty: the rename below puts the whole folder in its place
    with atomic_dir(out) as folder:
        hf_model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / HF_MODEL_CARD_FILE).write_text(model_card(run, family, out), encoding="utf-8")
    return {
        "hf_class": family.hf_class,
        "out": str(out),
        "files": sorted(p.name for p in out.iterdir()),
        "checkpoint": str(run.files.checkpoint),
    }


def _token_ids(run: LoadedRun) -> dict[str, int | None]:
    """The config's special token ids: pad, and for a model that generates, bos, eos and the
    decoder's first token as xfmr-generate uses them (none for a causal LM, which only
    max_new_tokens stops)."""
    pad = next(
        (
            run.tokenizer.token_to_id(t)
            for t in ("[PAD]", "<pad>")
            if run.tokenizer.token_to_id(t) is not None
        ),
        None,
    )
    ids: dict[str, int | None] = {"pad_token_id": pad}
    if run.model_config.arch == "decoder":
        ids |= {"bos_token_id": None, "eos_token_id": None}
    if run.model_config.arch == "encoder_decoder":
        task = run.objective.text_task(run.tokenizer)
        ids |= {
            "pad_token_id": task.pad_id,
            "eos_token_id": task.eos_id,
            "decoder_start_token_id": task.decoder_start_id,
            "bos_token_id": run.tokenizer.token_to_id("<s>"),
        }
    return ids


def _labels(run: LoadedRun) -> dict[str, Any]:
    labels = read_labels(run.files.run_dir) if run.objective.uses_labels else None
    if not labels:
        return {}
    return {
        "id2label": dict(enumerate(labels)),
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def _generation(hf_model: Any, run: LoadedRun) -> None:
    """generation_config.json says what xfmr-generate does by default: greedy, stopping at
    the objective's eos (a causal LM: at max_new_tokens only), never choosing the ids past the
    tokenizer's that a padded vocabulary (`model.vocab_multiple`) adds to the head."""
    if not hf_model.can_generate():
        return
    ids = _token_ids(run)
    settings = hf_model.generation_config
    for key in ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id"):
        if key in ids:
            setattr(settings, key, ids[key])
    settings.do_sample = False
    padded = list(range(run.tokenizer.vocab_size, hf_model.config.vocab_size))
    if padded:
        settings.suppress_tokens = padded


def model_card(run: LoadedRun, family: Family, out: Path) -> str:
    """README.md of the exported folder: what the model is, what it was trained on and how,
    how well it did, and how to load it."""
    results = _results(run.files.run_dir)
    config, model = run.config, run.model_config
    overrides = [o for o in results.get("overrides", []) if not o.startswith("hydra.")]
    # The model's metrics (val/loss, val/acc, ...); the machine's speed is not in `metrics`.
    metrics = {k: v for k, v in (results.get("metrics") or {}).items() if "/" in k}
    rows = "\n".join(f"| {k} | {v:.4g} |" for k, v in sorted(metrics.items())) or "| - | - |"
    auto = family.auto_class
    pipeline = f"pipeline_tag: {family.pipeline}\n" if family.pipeline else ""
    data = plain(config.data.settings)
    return f"""---
library_name: transformers
{pipeline}tags:
- xfmr
---

# {out.name}

A `{family.hf_class}` exported by xfmr from the run `{run.files.run_dir.name}`
(checkpoint `{run.files.checkpoint.name}`, step {run.global_step}).

## Architecture

arch={model.arch}, {model.n_layers} layers{_decoder_layers(model)}, d_model={model.d_model},
{model.n_heads} heads, d_ff={model.d_ff}, pos={model.pos.name}, norm={model.norm}
({model.placement}-LN), activation={model.activation}, bias={model.bias},
tied embeddings={model.tie_embeddings}, vocabulary {model.vocab_size} tokens{_rows(model)};
{sum(p.numel() for p in run.model.parameters()):,} parameters.

## Training

objective={run.objective.name}, {results.get("step", run.global_step)} optimizer steps.
Data: `{config.data.target.path}` with {json.dumps(data, default=str)}.

    xfmr-train {" ".join(overrides)}

## Results

| metric | value |
|---|---|
{rows}

## Use

```python
from transformers import AutoTokenizer, {auto}

tokenizer = AutoTokenizer.from_pretrained("{out.name}")
model = {auto}.from_pretrained("{out.name}")
```
"""


def _rows(model: Any) -> str:
    """The head's rows where a padded vocabulary adds some (ids never generated)."""
    if model.padded_vocab_size == model.vocab_size:
        return ""
    return f" in {model.padded_vocab_size} rows (model.vocab_multiple={model.vocab_multiple})"


def _decoder_layers(model: Any) -> str:
    return f" + {model.n_decoder_layers} decoder layers" if model.arch == "encoder_decoder" else ""


def _results(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RESULTS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
