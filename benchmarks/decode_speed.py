"""Decoding speed with and without the KV cache, greedy and beam search, side by side.

    python benchmarks/decode_speed.py [--new-tokens 64] [--batch 8] [--beams 5] [--threads N]
        [--variant-tokens 256]

Two models with random weights (nothing is downloaded): a decoder (GPT-style: pre-LN, GELU,
learned positions) and an encoder-decoder (the original Transformer: post-LN, ReLU, sinusoidal
positions), each 4 layers (per stack), d_model 256, 4 heads, d_ff 1024, vocabulary 8192, float32.
Inputs: `--batch` rows of random ids, prompt / source lengths spread over 16-32 tokens (so rows
are padded). No eos: every row generates exactly `--new-tokens` tokens. Each setting runs once
after a short warm-up; tokens/s counts the new tokens of the returned hypothesis per input row
(beam search runs batch x beams rows to get them). Without the cache every step is a full
forward pass over all tokens so far, logits at every position included (as a plain loop around
`model(ids)` does). The last column says whether both paths returned the same hypotheses.

A second table decodes greedily with the decoder's attention varied (`--variant-tokens` new
tokens, past the windows): grouped-query and multi-query attention (`model.n_kv_heads`) and
sliding windows (`model.window`), each with its cache's bytes per position per row at the end
(`KVCache.nbytes`: n_kv_heads / n_heads of the full cache; a windowed layer holds window - 1
positions however long the sequence) and whether the cached and uncached paths agree.
"""

from __future__ import annotations

import time

import torch

from common.cli import script_parser
from xfmr.generation import GenerationConfig, generate
from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import build_model

LAYERS, D_MODEL, HEADS, D_FF, VOCAB = 4, 256, 4, 1024, 8192
MODELS = {
    "decoder": dict(arch="decoder", placement="pre", activation="gelu", pos="learned"),
    "encoder_decoder": dict(
        arch="encoder_decoder", placement="post", activation="relu", pos="sinusoidal"
    ),
}


# The decoder's attention, varied (`variants_table`).
VARIANTS = {
    "multi-head": {},
    "grouped-query, 2 kv heads": dict(n_kv_heads=2),
    "multi-query": dict(n_kv_heads=1),
    "window 64": dict(window=64),
    "window 16": dict(window=16),
}


def build(name: str, **extra) -> torch.nn.Module:
    settings = dict(MODELS[name], **extra)
    pos = settings.pop("pos")
    config = ModelConfig(
        vocab_size=VOCAB,
        n_layers=LAYERS,
        n_heads=HEADS,
        d_model=D_MODEL,
        d_ff=D_FF,
        pos=PosConfig(name=pos, max_positions=512),
        **settings,
    )
    torch.manual_seed(0)
    return build_model(config).eval()


def inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (batch, 32) and a right-padding mask with lengths spread over 16 .. 32."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (batch, 32), generator=generator)
    lengths = torch.linspace(16, 32, batch).long()
    return ids, (torch.arange(32)[None, :] < lengths[:, None]).long()


def timed(model, ids, mask, config: GenerationConfig) -> tuple[float, list]:
    start = time.perf_counter()
    out = generate(model, ids, mask, config=config, eos_id=None, pad_id=0, decoder_start_id=1)
    return time.perf_counter() - start, out


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--variant-tokens", type=int, default=256)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ids, mask = inputs(args.batch)
    strategies = {"greedy": {}, f"beam {args.beams}": dict(strategy="beam", num_beams=args.beams)}
    print(
        f"batch {args.batch}, {args.new_tokens} new tokens, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}"
    )
    print("\n| model | strategy | cached tok/s | no cache tok/s | cached s | no cache s | "
          "speed-up | same output |")  # fmt: skip
    print("|---|---|--:|--:|--:|--:|--:|---|")
    for name in MODELS:
        model = build(name)
        for label, settings in strategies.items():
            generate(model, ids[:2], mask[:2], config=GenerationConfig(max_new_tokens=4, **settings),
                     eos_id=None, pad_id=0, decoder_start_id=1)  # fmt: skip
            runs = {
                cache: timed(
                    model,
                    ids,
                    mask,
                    GenerationConfig(max_new_tokens=args.new_tokens, use_cache=cache, **settings),
                )
                for cache in (True, False)
            }
            (cached_s, cached), (plain_s, plain) = runs[True], runs[False]
            tokens = args.batch * args.new_tokens
            same = [[h.tokens for h in row] for row in cached] == [
                [h.tokens for h in row] for row in plain
            ]
            print(
                f"| {name} | {label} | {tokens / cached_s:.0f} | {tokens / plain_s:.0f} | "
                f"{cached_s:.2f} | {plain_s:.2f} | {plain_s / cached_s:.1f}x | "
                f"{'yes' if same else 'NO'} |"
            )
    variants_table(ids, mask, args.variant_tokens)


def cache_bytes(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """Bytes the cache holds per position per row after a forward over `ids` (B, S)."""
    cache = KVCache()
    with torch.no_grad():
        model(ids, mask, cache=cache)
    return cache.nbytes / ids.numel()


def variants_table(ids: torch.Tensor, mask: torch.Tensor, new_tokens: int) -> None:
    """Greedy decoding of the decoder with each attention of VARIANTS, cached beside uncached."""
    print(f"\ndecoder, greedy, {new_tokens} new tokens (prompts of 16-32)")
    print("\n| attention | cached tok/s | vs multi-head | cache bytes/position | vs multi-head "
          "| same output |")  # fmt: skip
    print("|---|--:|--:|--:|--:|---|")
    first = None
    for label, extra in VARIANTS.items():
        model = build("decoder", **extra)
        config = dict(max_new_tokens=new_tokens)
        generate(model, ids[:2], mask[:2], config=GenerationConfig(max_new_tokens=4),
                 eos_id=None, pad_id=0)  # fmt: skip
        seconds, cached = timed(model, ids, mask, GenerationConfig(**config))
        _, plain = timed(model, ids, mask, GenerationConfig(use_cache=False, **config))
        rate = ids.size(0) * new_tokens / seconds
        longest = torch.cat((ids, ids.new_ones(ids.size(0), new_tokens)), dim=1)
        held = cache_bytes(model, longest, torch.ones_like(longest))
        first = first or (rate, held)
        same = [[h.tokens for h in row] for row in cached] == [
            [h.tokens for h in row] for row in plain
        ]
        print(f"| {label} | {rate:.0f} | {rate / first[0]:.2f}x | {held:.0f} | "
              f"{held / first[1]:.3f} | {'yes' if same else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main()
