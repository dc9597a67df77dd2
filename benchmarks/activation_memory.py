"""What model.activation_checkpointing and objective.loss_chunk save: the memory a training step
keeps for backward, with each block's activations kept (off) and recomputed in backward (on),
and with the output head's logits made whole (null) or a chunk of tokens at a time, at
size=base.

    python benchmarks/activation_memory.py [--device cuda] [--quick] [--loss-chunk N]

The model: a decoder (arch=decoder, the clm objective) of conf/size/base.yaml's shape (or
size=tiny's with --quick), dropout off, on one batch of random tokens (--batch x --block, vocab
--vocab), float32. For each setting, one forward and backward:

- saved MiB: the tensors autograd keeps for backward other than the parameters, each storage
  counted once, as `torch.autograd.graph.saved_tensors_hooks` sees them being packed: device-
  independent, and what checkpointing shrinks (with it on, a block keeps its input only);
- peak MiB (CUDA only): `torch.cuda.max_memory_allocated` over the step, less what was allocated
  before it (parameters, the batch);
- ms: the step's time (CUDA: synchronized; the recomputation is the extra);
- loss: the step's loss (mean over its tokens), to show every setting computes the same thing
  (checkpointing and chunks change how, not what: the chunked loss adds its tokens' terms in
  another order, so it agrees to float32's rounding, not bit for bit).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import yaml

from common.cli import script_parser

MiB = 2**20


def arguments() -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="size=tiny, a small batch")
    parser.add_argument("--batch", type=int, default=None, help="default: 8 (--quick: 4)")
    parser.add_argument("--block", type=int, default=None, help="default: 512 (--quick: 64)")
    parser.add_argument("--vocab", type=int, default=None, help="default: 32000 (--quick: 256)")
    parser.add_argument(
        "--loss-chunk", type=int, default=None, help="objective.loss_chunk: 1024 (--quick: 64)"
    )
    args = parser.parse_args()
    args.loss_chunk = args.loss_chunk or (64 if args.quick else 1024)
    args.size = "tiny" if args.quick else "base"
    args.batch = args.batch or (4 if args.quick else 8)
    args.block = args.block or (64 if args.quick else 512)
    args.vocab = args.vocab or (256 if args.quick else 32000)
    return args


def size_shape(size: str) -> dict:
    """conf/size/SIZE.yaml's model keys: the shape is said once, there."""
    from xfmr.paths import config_dir

    return yaml.safe_load(Path(config_dir(), "size", f"{size}.yaml").read_text())


def step(args: argparse.Namespace, checkpointing: bool, loss_chunk: int | None) -> dict:
    from xfmr.nn.config import ModelConfig
    from xfmr.objectives import CausalLMObjective
    from xfmr.objectives.terms import divided

    device = torch.device(args.device)
    config = ModelConfig(
        vocab_size=args.vocab,
        dropout=0.0,
        activation_checkpointing=checkpointing,
        **{**size_shape(args.size), "arch": "decoder"},
    )
    objective = CausalLMObjective(loss_chunk=loss_chunk)
    torch.manual_seed(0)
    model = objective.build_model(config).to(device)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.block + 1), generator=generator)
    batch = {"input_ids": ids[:, :-1].to(device), "labels": ids[:, 1:].to(device)}
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        sums, _ = objective.forward(model, batch)
        loss = divided(sums, objective.counts(batch))  # the mean over the batch's tokens
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "saved": sum(saved.values()) / MiB,
        "peak": (torch.cuda.max_memory_allocated() - before) / MiB if cuda else None,
        "ms": seconds * 1000,
        "loss": loss.item(),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    args = arguments()
    settings = [(on, chunk) for chunk in (None, args.loss_chunk) for on in (False, True)]
    for setting in settings:  # warm-up: kernels, the allocator, lazy imports
        step(args, *setting)
    rows = {setting: step(args, *setting) for setting in settings}
    parameters = rows[settings[0]]["parameters"]
    print(
        f"size={args.size} (arch=decoder, {parameters / 1e6:.1f}M parameters), batch "
        f"{args.batch} x block {args.block}, vocab {args.vocab}, float32, device {args.device}"
    )
    print()
    print("| activation_checkpointing | loss_chunk | saved MiB | peak MiB | ms | loss |")
    print("|---|---|---|---|---|---|")
    for (on, chunk), row in rows.items():
        peak = f"{row['peak']:.1f}" if row["peak"] is not None else "-"
        print(
            f"| {str(on).lower()} | {chunk or 'null'} | {row['saved']:.1f} | {peak} | "
            f"{row['ms']:.1f} | {row['loss']:.6f} |"
        )
    print()
    base = rows[(False, None)]
    for (on, chunk), row in list(rows.items())[1:]:
        shown = f"activation_checkpointing={str(on).lower()} loss_chunk={chunk or 'null'}"
        line = f"{shown}: saved for backward {row['saved'] / base['saved']:.2f}x"
        if base["peak"] is not None:
            line += f", peak memory of the step {row['peak'] / base['peak']:.2f}x"
        print(line)
    losses = [row["loss"] for row in rows.values()]
    print(f"same loss: {max(losses) - min(losses) <= 1e-5 * abs(losses[0])}")


if __name__ == "__main__":
    main()
