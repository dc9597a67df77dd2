"""step_overhead.py's reference: nanoGPT's train.py loop written out in plain PyTorch, a step at a
time, around nanoGPT's model or xfmr's; the same loop under Lightning's Trainer alone; and the
setting every row shares (the shape, the optimizer and schedule of the experiment).

The module imports the standard library alone (torch inside the functions, Lightning only for
Lightning's loop), so that a plain loop's process loads no more than the loop asks for.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.nanogpt import model_classes
from common.xfmr_runs import Shape

SEED = 1337
VAL_FRACTION = 0.1  # the text datamodule's default: the plain loops train on the same head
LOG_INTERVAL = 10  # the plain loops read the loss this often; xfmr's trainer.log_every_n_steps
# The optimizer and schedule of experiment=nanogpt_shakespeare_char (conf/optim/adamw.yaml and
# the experiment's overrides), which xfmr-train reads from its config.
LR, BETAS, WEIGHT_DECAY, MIN_LR_RATIO, GRAD_CLIP = 1e-3, (0.9, 0.99), 0.1, 0.1, 1.0
SHAPE = Shape(d_model=48, n_layers=6, n_heads=6, block_size=32, batch_size=4)


def lr_warmup_steps(steps: int) -> int:
    """The schedule's warm-up, 5% of the run as in the experiment, the same for every row."""
    return max(1, round(0.05 * steps))


def plain_loop(args: argparse.Namespace) -> None:
    """One plain-loop row in this process: trains `args.steps` steps, records their end times."""
    import torch

    torch.set_num_threads(1)
    if args.plain in ("lightning", "lightning_manual"):
        return lightning_alone(args, manual=args.plain == "lightning_manual")
    loop = PlainLoop(args.plain, args.nanogpt, args.data, steps=args.steps)
    # xfmr's model is paired with nanoGPT's as xfmr-train is: the two models side by side.
    beside = (
        PairedPlainLoop(args.nanogpt, args.data, steps=args.steps) if args.plain == "xfmr" else None
    )
    times, paired, paired_total = [], [], 0.0
    for _ in range(args.steps):
        loop.step()
        times.append(time.perf_counter() - paired_total)
        if beside is not None:
            paired.append(beside.step())
            paired_total += paired[-1]
    record = {"times": times, "paired": paired, "threads": torch.get_num_threads(),
              "loss": loop.loss.item()}  # fmt: skip
    args.record.write_text(json.dumps(record))


def lightning_alone(args: argparse.Namespace, *, manual: bool = False) -> None:
    """Lightning's Trainer around nanoGPT's model with nothing of xfmr's and everything
    optional off (no logger, callbacks, checkpointing, progress bar or summary): the same
    batches, optimizer, schedule and clipping as the plain loop, stepped beside it as the
    xfmr-train rows are. What Lightning's own loop costs at this shape.

    `manual`: under manual optimization, as xfmr's training step runs (Lightning's
    `manual_backward`, its optimizer wrapper's `step`, clipping and the schedule in the step);
    else Lightning's automatic optimization (its closure, clipping and schedule)."""
    import lightning as L
    import torch

    from overhead.step_times import StepTimes

    loop = PlainLoop("nanogpt", args.nanogpt, args.data, steps=args.steps)

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            generator = torch.Generator().manual_seed(SEED + 1)
            while True:
                yield random_batch(loop.train, generator)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = loop.model
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = loop.loss_of(*batch)
            if not manual:
                return loss
            optimizer = self.optimizers()
            self.manual_backward(loss)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            self.lr_schedulers().step()
            return None

        def configure_optimizers(self):
            optimizer = adamw(self.model)
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer,
                lambda step: nanogpt_lr(step, warmup=loop.warmup, decay_steps=args.steps) / LR,
            )
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule,
                                                             "interval": "step"}}  # fmt: skip

    timer = StepTimes(str(args.record), nanogpt=str(args.nanogpt), data=str(args.data))
    trainer = L.Trainer(accelerator="cpu", max_steps=args.steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False,
                        gradient_clip_val=None if manual else GRAD_CLIP,
                        limit_val_batches=0, callbacks=[timer])  # fmt: skip
    trainer.fit(Module(), torch.utils.data.DataLoader(Batches(), batch_size=None))


class PlainLoop:
    """nanoGPT's train.py loop at SHAPE around `model` ("nanogpt" or "xfmr"), a step at a time:
    lr set, batch drawn (from a generator of its own), forward, backward, clipping, update,
    zero_grad, and the loss read every LOG_INTERVAL steps."""

    def __init__(self, model: str, nanogpt: Path, data: Path, *, steps: int) -> None:
        import torch

        with torch.random.fork_rng():  # a paired loop leaves the run's generators alone
            torch.manual_seed(SEED)
            text = data.read_text(encoding="utf-8")
            vocab = {c: i for i, c in enumerate(sorted(set(text)))}
            tokens = torch.tensor([vocab[c] for c in text], dtype=torch.long)
            self.train = tokens[: int(len(tokens) * (1 - VAL_FRACTION))]
            # One more id than characters: xfmr's char tokenizer adds <unk>, so both match.
            self.model, self.loss_of = plain_model(model, nanogpt, vocab_size=len(vocab) + 1)
        self.model.train()
        self.optimizer = adamw(self.model)
        self.generator = torch.Generator().manual_seed(SEED)
        self.steps, self.warmup, self.done = steps, lr_warmup_steps(steps), 0
        self.loss = None

    def step(self) -> None:
        import torch

        for group in self.optimizer.param_groups:
            group["lr"] = nanogpt_lr(self.done, warmup=self.warmup, decay_steps=self.steps)
        x, y = random_batch(self.train, self.generator)
        self.loss = self.loss_of(x, y)
        self.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.done % LOG_INTERVAL == 0:
            self.loss.item()
        self.done += 1


class PairedPlainLoop(PlainLoop):
    """The plain loop over nanoGPT's model, a step after each of xfmr's in the same process."""

    def __init__(self, nanogpt: Path, data: Path, *, steps: int) -> None:
        super().__init__("nanogpt", nanogpt, data, steps=steps)

    def step(self) -> float:  # type: ignore[override]
        """One step; its seconds."""
        started = time.perf_counter()
        super().step()
        return time.perf_counter() - started


def plain_model(name: str, nanogpt: Path, *, vocab_size: int) -> tuple[Any, Callable]:
    """(model, loss of (x, y)) for nanoGPT's GPT or xfmr's decoder at SHAPE."""
    if name == "nanogpt":
        GPT, GPTConfig = model_classes(nanogpt)
        config = GPTConfig(block_size=SHAPE.block_size, vocab_size=vocab_size,
                           n_layer=SHAPE.n_layers, n_head=SHAPE.n_heads, n_embd=SHAPE.d_model,
                           dropout=0.0, bias=False)  # fmt: skip
        model = GPT(config)
        return model, lambda x, y: model(x, y)[1]
    from xfmr.nn import ModelConfig
    from xfmr.objectives import CausalLMObjective

    config = ModelConfig(vocab_size=vocab_size, n_layers=SHAPE.n_layers, n_heads=SHAPE.n_heads,
                         d_model=SHAPE.d_model, bias=False, dropout=0.0, tie_embeddings=True,
                         pos={"name": "learned", "max_positions": SHAPE.block_size})  # fmt: skip
    objective = CausalLMObjective()
    model = objective.build_model(config)

    def loss(x: Any, y: Any) -> Any:  # the objective's sum over the block, as a mean: all count
        return objective.forward(model, {"input_ids": x, "labels": y})[0]["tokens"] / y.numel()

    return model, loss


def adamw(model: Any) -> Any:
    """Fused AdamW, weight decay on matrices and embeddings only (tied weights listed once)."""
    import torch

    params = list(model.parameters())  # unique: nn.Module yields a shared tensor once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=True)


def nanogpt_lr(step: int, *, warmup: int, decay_steps: int) -> float:
    """nanoGPT's get_lr: linear warm-up, then cosine decay to MIN_LR_RATIO * LR."""
    if step < warmup:
        return LR * (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / (decay_steps - warmup))
    return LR * (MIN_LR_RATIO + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1 - MIN_LR_RATIO))


def random_batch(tokens: Any, generator: Any) -> tuple[Any, Any]:
    """nanoGPT's get_batch: BATCH random offsets, inputs and targets shifted by one, stacked."""
    import torch

    block = SHAPE.block_size
    starts = torch.randint(len(tokens) - block, (SHAPE.batch_size,), generator=generator)
    x = torch.stack([tokens[i : i + block] for i in starts])  # (B, T)
    y = torch.stack([tokens[i + 1 : i + 1 + block] for i in starts])  # (B, T)
    return x, y
