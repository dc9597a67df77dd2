"""Forward + backward time of xfmr beside Hugging Face transformers, with the same weights.

    python benchmarks/hf_speed.py [--steps 10] [--warmup 2] [--threads N] [--attn sdpa]

One small config per family (GPT-2, BERT, T5 v1.1): 4 layers, d_model 256, 4 heads, d_ff 1024,
vocabulary 8192, batch 8, sequence 128 (T5: 128 source and 128 target tokens), float32, no
padding, dropout 0. Each HF model is built from a random config (nothing is downloaded) and
converted with `xfmr.interop.hf.from_hf`; the two are timed alternately in one process, which
goes first swapping every step, and the median of `--steps` steps after `--warmup` is reported
with the ratio xfmr / HF. A step is forward, loss (cross-entropy against random targets; BERT
adds the NSP loss) and backward; gradients are cleared outside the timed region. The table also
gives the largest logit difference between the two after timing (same batch, no grad), so a
table from a broken conversion shows it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common.cli import script_parser

LAYERS, D_MODEL, HEADS, D_FF, VOCAB, BATCH, SEQ = 4, 256, 4, 1024, 8192, 8, 128


def build_pairs(attn: str) -> dict[str, tuple[nn.Module, nn.Module]]:
    """family -> (HF model, xfmr model holding the same weights), both in train mode."""
    import transformers

    from xfmr.interop.hf import from_hf

    common = dict(vocab_size=VOCAB, attn_implementation=attn)
    gpt2 = transformers.GPT2Config(
        **common,
        n_positions=SEQ,
        n_embd=D_MODEL,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=D_FF,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    bert = transformers.BertConfig(
        **common,
        hidden_size=D_MODEL,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=D_FF,
        max_position_embeddings=SEQ,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    t5 = transformers.T5Config(
        **common,
        d_model=D_MODEL,
        d_kv=D_MODEL // HEADS,
        d_ff=D_FF,
        num_layers=LAYERS,
        num_heads=HEADS,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        dropout_rate=0.0,
    )
    hf_models = {
        "gpt2": transformers.GPT2LMHeadModel(gpt2),
        "bert": transformers.BertForPreTraining(bert),
        "t5 v1.1": transformers.T5ForConditionalGeneration(t5),
    }
    # transformers 5 ties T5's lm_head whatever the config says; v1.1 checkpoints have their own.
    lm_head = hf_models["t5 v1.1"].lm_head
    lm_head.weight = nn.Parameter(lm_head.weight.detach().clone())
    return {name: (hf.train(), from_hf(hf).train()) for name, hf in hf_models.items()}


Forward = Callable[[nn.Module], tuple[torch.Tensor, ...]]


def forwards(family: str, batch: dict[str, torch.Tensor]) -> tuple[Forward, Forward]:
    """(HF forward, xfmr forward): each maps its model to the same logits, LM logits first."""
    ids, decoder_ids = batch["ids"], batch["decoder_ids"]
    if family == "gpt2":
        return (lambda m: (m(ids).logits,)), (lambda m: (m(ids),))
    if family == "bert":

        def hf_bert(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
            out = model(ids)
            return out.prediction_logits, out.seq_relationship_logits

        return hf_bert, (lambda m: m(ids))
    return (
        lambda m: (m(input_ids=ids, decoder_input_ids=decoder_ids).logits,),
        lambda m: (m(ids, None, decoder_ids),),
    )


def make_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "ids": torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator),
        "decoder_ids": torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator),
        "targets": torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator),
        "nsp_targets": torch.randint(0, 2, (BATCH,), generator=generator),
    }


def loss_of(outputs: tuple[torch.Tensor, ...], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of the LM logits (B, T, V) against random targets, plus BERT's NSP loss."""
    loss = F.cross_entropy(outputs[0].flatten(0, 1), batch["targets"].flatten())
    if len(outputs) > 1:
        loss = loss + F.cross_entropy(outputs[1], batch["nsp_targets"])
    return loss


@torch.no_grad()
def max_logit_diff(family: str, hf_model: nn.Module, model: nn.Module) -> float:
    hf_forward, xfmr_forward = forwards(family, make_batch())
    pairs = zip(hf_forward(hf_model), xfmr_forward(model), strict=True)
    return max((theirs - ours).abs().max().item() for theirs, ours in pairs)


def timed_step(model: nn.Module, forward: Forward, batch: dict[str, torch.Tensor]) -> float:
    """Seconds for forward, loss and backward."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss_of(forward(model), batch).backward()
    return time.perf_counter() - start


def bench(family: str, hf_model: nn.Module, model: nn.Module, *, steps: int, warmup: int) -> dict:
    batch = make_batch()
    hf_forward, xfmr_forward = forwards(family, batch)
    runs = {"xfmr": (model, xfmr_forward), "hf": (hf_model, hf_forward)}
    times: dict[str, list[float]] = {"xfmr": [], "hf": []}
    for step in range(warmup + steps):
        for name in ["xfmr", "hf"] if step % 2 == 0 else ["hf", "xfmr"]:
            seconds = timed_step(*runs[name], batch)
            if step >= warmup:
                times[name].append(seconds)
    xfmr_ms = 1000 * statistics.median(times["xfmr"])
    hf_ms = 1000 * statistics.median(times["hf"])
    return {
        "family": family,
        "xfmr_ms": xfmr_ms,
        "hf_ms": hf_ms,
        "ratio": xfmr_ms / hf_ms,
        "logit_diff": max_logit_diff(family, hf_model, model),
    }


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: as is)")
    parser.add_argument("--attn", default="sdpa", help="HF attn_implementation (sdpa | eager)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, HF attention {args.attn}, float32 CPU; "
        f"{LAYERS} layers, d_model {D_MODEL}, {HEADS} heads, d_ff {D_FF}, vocab {VOCAB}, "
        f"batch {BATCH} x seq {SEQ}; median of {args.steps} steps after {args.warmup} warm-up"
    )
    rows = [
        bench(family, hf_model, model, steps=args.steps, warmup=args.warmup)
        for family, (hf_model, model) in build_pairs(args.attn).items()
    ]
    print(f"\n| {'family':8} | xfmr ms | HF ms | xfmr/HF | max abs logit diff |")
    print("|----------|--------:|------:|--------:|-------------------:|")
    for row in rows:
        print(
            f"| {row['family']:8} | {row['xfmr_ms']:7.1f} | {row['hf_ms']:5.1f} | "
            f"{row['ratio']:7.2f} | {row['logit_diff']:18.1e} |"
        )


if __name__ == "__main__":
    main()
