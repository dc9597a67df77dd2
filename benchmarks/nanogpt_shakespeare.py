"""nanoGPT's CPU run on tiny Shakespeare, through xfmr-train, beside a plain PyTorch loop.

    python benchmarks/nanogpt_shakespeare.py --data ../shared/data/tinyshakespeare/input.txt

Runs `xfmr-train experiment=nanogpt_shakespeare_char` for its 2000 steps (eval every 250) and
reads val loss and median ms per training step from results.json. In the same run it times a
plain PyTorch loop written like nanoGPT's train.py (random windows, AdamW, clipping, the same
xfmr model, no Lightning) so the framework's overhead shows as a ratio on this machine, today.
nanoGPT's own figures on this machine kind: val loss 1.886 at step 2000, 33-39 ms/step, ~80 s.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from common.cli import add_shakespeare, script_parser
from common.xfmr_runs import xfmr_train

NANOGPT = {"val_loss": 1.886, "ms_per_step": "33-39", "wall_s": 80}


def run_xfmr(data: Path, out: Path, steps: int, precision: str) -> dict:
    overrides = [
        "experiment=nanogpt_shakespeare_char",
        f"data.path={data}",
        f"trainer.max_steps={steps}",
        f"trainer.precision={precision}",
        "callbacks.progress_bar=null",
        "print_config=false",
    ]
    finished = xfmr_train(overrides, out / f"xfmr-{precision}", out / "cache")
    results = finished.results
    return {
        "run": f"xfmr-train ({precision})",
        "steps": results["step"],
        "val_loss": results["metrics"]["val/loss"],
        "ms_per_step": results["ms_per_step"],
        "wall_s": finished.wall_s,
    }


def run_plain_loop(data: Path, steps: int) -> dict:
    """nanoGPT's train.py loop (CPU, fp32, no compile) around the same xfmr model."""
    import torch
    import torch.nn.functional as F

    from xfmr.nn import ModelConfig, build_model
    from xfmr.training.optim import param_groups, warmup_cosine

    torch.manual_seed(1337)
    text = data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text[: int(0.9 * len(text))]], dtype=torch.long)
    block, batch = 64, 12
    model = build_model(
        ModelConfig(
            vocab_size=len(chars),
            n_layers=4,
            n_heads=4,
            d_model=128,
            bias=False,
            pos={"name": "learned", "max_positions": block},
        )
    )
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
    scheduler = warmup_cosine(optimizer, total_steps=2000, warmup_steps=100, min_lr_ratio=0.1)
    times = []
    last = time.perf_counter()
    for _ in range(steps):
        starts = torch.randint(len(ids) - block - 1, (batch,))
        x = torch.stack([ids[i : i + block] for i in starts])
        y = torch.stack([ids[i + 1 : i + 1 + block] for i in starts])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        loss.item()
        now = time.perf_counter()
        times.append((now - last) * 1000)
        last = now
    return {
        "run": "plain PyTorch loop, same model",
        "steps": steps,
        "val_loss": None,
        "ms_per_step": statistics.median(times[5:]),
        "wall_s": sum(times) / 1000,
    }


def main() -> None:
    parser = script_parser(__doc__)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/nanogpt_shakespeare"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--plain-steps", type=int, default=300)
    parser.add_argument(
        "--bf16", action="store_true", help="also run with trainer.precision=bf16-mixed"
    )
    args = parser.parse_args()

    rows = [
        run_plain_loop(args.data, args.plain_steps),
        run_xfmr(args.data, args.out, args.steps, "32-true"),
    ]
    if args.bf16:
        rows.append(run_xfmr(args.data, args.out, args.steps, "bf16-mixed"))
    rows.append({"run": "nanoGPT train.py (documented)", "steps": 2000, **NANOGPT})

    print(f"\n{'run':34s} {'steps':>6s} {'val loss':>9s} {'ms/step':>9s} {'wall s':>8s}")
    for r in rows:
        loss = f"{r['val_loss']:.3f}" if isinstance(r["val_loss"], float) else "-"
        ms = f"{r['ms_per_step']:.1f}" if isinstance(r["ms_per_step"], float) else r["ms_per_step"]
        print(f"{r['run']:34s} {r['steps']:>6d} {loss:>9s} {ms:>9s} {r['wall_s']:>8.0f}")
    print(
        f"\nxfmr-train / plain loop, ms per step: {rows[1]['ms_per_step'] / rows[0]['ms_per_step']:.2f}x"
    )


if __name__ == "__main__":
    main()
