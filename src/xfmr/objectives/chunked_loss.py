"""The output head and the token cross-entropy in one pass over chunks of tokens, without the
(tokens x vocabulary) logits ever held whole: `objective.loss_chunk` of the objectives that train
a decoder's vocabulary head (causal language modelling, sequence to sequence).

The plain path computes logits (N, V) for N tokens, a float32 copy of them, its log-softmax
for the backward and a gradient of the same size: at GPT-2's vocabulary (50,304) and 8 rows of
1,024 tokens, each float32 (N, V) tensor is 1.6 GB. Here each chunk of `chunk` tokens makes its
logits, its loss and at once its gradients with respect to the hidden states and the head's
weight (and bias), the chunk's logits freed before the next: memory O(chunk x V) for the loss
instead of O(N x V), and the head's two backward matmuls run inside the forward, so nothing
is computed twice. The backward only scales the stored gradients by the loss's own gradient.
This is the fused linear cross-entropy of Liger Kernel (Hsu et al. 2024), written with torch's
own ops so it runs on every device and under torch.compile; `tests/objectives/test_loss_chunk.py`
checks it against the plain path (`xfmr.objectives.common.token_terms`).

What the head does is done here too, in the same order: µP's readout multiplier on the hidden
states (`xfmr.nn.mup.Readout`), the bias, the logit soft-cap (Gemma 2; `xfmr.nn.flex.softcap`),
the padded vocabulary's extra rows (they take part in the softmax, as in the plain path), label
smoothing as `F.cross_entropy` takes it, and PaLM's z-loss (`common.z_loss_sum`) beside the
cross-entropy, each a sum over the tokens whose label is not IGNORE_INDEX.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from xfmr.objectives.common import IGNORE_INDEX, Z_LOSS


def checked_loss_chunk(loss_chunk: int | None) -> int | None:
    """`objective.loss_chunk` as an objective's constructor takes it: None or a whole number
    >= 1."""
    if loss_chunk is not None and (isinstance(loss_chunk, bool) or loss_chunk < 1):
        raise ValueError(f"objective.loss_chunk={loss_chunk} must be a positive integer")
    return loss_chunk


def chunked_token_terms(
    hidden: torch.Tensor,
    model: torch.nn.Module,
    labels: torch.Tensor,
    *,
    chunk: int,
    z_loss: float = 0.0,
    label_smoothing: float = 0.0,
) -> dict[str, torch.Tensor]:
    """`common.token_terms` of `model`'s logits, made from its last hidden states `hidden`
    (B, T, C) through its `lm_head` and logit soft-cap `chunk` tokens at a time."""
    ce, z = chunked_head_loss(
        hidden,
        model.lm_head,
        labels,
        chunk=chunk,
        softcap=model.config.logit_softcap,
        z_loss=bool(z_loss),
        label_smoothing=label_smoothing,
    )
    return {"tokens": ce} if z is None else {"tokens": ce, Z_LOSS: z_loss * z}


def chunked_head_loss(
    hidden: torch.Tensor,
    head: torch.nn.Linear,
    labels: torch.Tensor,
    *,
    chunk: int,
    softcap: float | None = None,
    z_loss: bool = False,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(cross-entropy summed over the counted tokens, PaLM's unweighted z-loss summed over the
    same tokens or None) of `head`'s logits of `hidden` (B, T, C) against `labels` (B, T),
    `chunk` tokens at a time. `head` is an nn.Linear, or xfmr's Readout with its multiplier."""
    multiplier = getattr(head, "multiplier", None)
    ce, z = _ChunkedHeadLoss.apply(
        hidden.flatten(0, -2),
        head.weight,
        head.bias,
        labels.flatten(),
        chunk,
        multiplier,
        softcap,
        z_loss,
        label_smoothing,
    )
    return ce, (z if z_loss else None)


class _ChunkedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(  # noqa: PLR0913 - autograd.Function takes its inputs positionally
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        chunk: int,
        multiplier: float | None,
        softcap: float | None,
        z_loss: bool,
        smoothing: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        grads = _Gradients(hidden, weight, bias, ctx.needs_input_grad[:3], z_loss)
        ce = torch.zeros((), dtype=torch.float32, device=hidden.device)
        z = torch.zeros_like(ce)
        for start in range(0, hidden.size(0), chunk):
            rows = slice(start, start + chunk)
            h = hidden[rows] if multiplier is None else hidden[rows] * multiplier
            logits = F.linear(h, weight, bias)  # (n, V), autocast's dtype
            part = _chunk_loss(logits, labels[rows], softcap, z_loss, smoothing)
            ce, z = ce + part.ce, z + part.z
            grads.add(rows, h, part, multiplier)
        ctx.save_for_backward(*grads.saved())
        ctx.layout = grads.layout()
        return ce, z

    @staticmethod
    def backward(ctx: Any, grad_ce: torch.Tensor | None, grad_z: torch.Tensor | None):
        stored = dict(zip(ctx.layout, ctx.saved_tensors, strict=True))
        out = []
        for name in ("hidden", "weight", "bias"):
            total = None
            for term, scale in (("ce", grad_ce), ("z", grad_z)):
                grad = stored.get(f"{name}_{term}")
                if grad is None or scale is None:
                    continue
                grad = grad * scale.to(grad.dtype)
                total = grad if total is None else total + grad
            out.append(total)
        return (*out, None, None, None, None, None, None)


class _ChunkLoss(NamedTuple):
    """One chunk's loss sums and the gradients of each with respect to its logits (float32)."""

    ce: torch.Tensor
    z: torch.Tensor  # 0 without the z-loss
    grad_ce: torch.Tensor
    grad_z: torch.Tensor | None


def _chunk_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    softcap: float | None,
    z_loss: bool,
    smoothing: float,
) -> _ChunkLoss:
    """Sums over the chunk's counted tokens of the cross-entropy against (1 - a) onehot + a / V
    (a = `smoothing`; 0: -log p(label)) and of log(Z)^2, and their gradients with respect to the
    head's raw logits (before the soft-cap)."""
    scores = logits.float()
    capped = None
    if softcap is not None:
        capped = torch.tanh(scores / softcap)
        scores = softcap * capped
    counted = labels != IGNORE_INDEX
    targets = labels.clamp(min=0)
    lse = torch.logsumexp(scores, dim=-1)  # (n,)
    picked = scores.gather(1, targets[:, None]).squeeze(1)
    probs = torch.exp(scores - lse[:, None]) * counted[:, None]  # rows that count, else 0
    nll = lse - picked
    target = probs  # the gradient is softmax - q, q = (1 - a) onehot + a / V
    if smoothing:  # -sum_v q_v log p_v = (1 - a)(lse - s_label) + a (lse - mean_v s_v)
        nll = (1.0 - smoothing) * nll + smoothing * (lse - scores.mean(dim=-1))
        target = probs - (smoothing / scores.size(-1)) * counted[:, None]
    grad_ce = target.scatter_add(1, targets[:, None], -(1.0 - smoothing) * counted[:, None].float())
    ce = (nll * counted).sum()
    z = grad_z = None
    if z_loss:
        z = (lse.square() * counted).sum()
        grad_z = probs * (2.0 * lse)[:, None]  # d lse^2 / d s = 2 lse softmax(s)
    if capped is not None:  # d (cap tanh(x / cap)) / dx = 1 - tanh^2
        slope = 1.0 - capped.square()
        grad_ce = grad_ce * slope
        grad_z = grad_z * slope if grad_z is not None else None
    return _ChunkLoss(ce, z if z is not None else torch.zeros_like(ce), grad_ce, grad_z)


class _Gradients:
    """The gradients of the two sums with respect to the hidden states, the weight and the
    bias, filled chunk by chunk: the hidden states' a slice each, the weight's and the bias's
    added up in float32."""

    def __init__(self, hidden, weight, bias, needs: tuple[bool, bool, bool], z_loss: bool):
        self.terms = ("ce", "z") if z_loss else ("ce",)
        self.needs = dict(zip(("hidden", "weight", "bias"), needs, strict=True))
        self.weight = weight
        self.grads: dict[str, torch.Tensor] = {}
        for term in self.terms:
            if self.needs["hidden"]:
                self.grads[f"hidden_{term}"] = torch.zeros_like(hidden)
            if self.needs["weight"]:
                self.grads[f"weight_{term}"] = torch.zeros_like(weight, dtype=torch.float32)
            if self.needs["bias"]:
                self.grads[f"bias_{term}"] = torch.zeros_like(bias, dtype=torch.float32)

    def add(self, rows: slice, h: torch.Tensor, part: _ChunkLoss, multiplier: float | None):
        for term in self.terms:
            grad = part.grad_ce if term == "ce" else part.grad_z
            grad = grad.to(h.dtype)  # as autograd's would reach the head's matmuls
            if self.needs["hidden"]:
                into = grad @ self.weight.to(grad.dtype)  # (n, C)
                if multiplier is not None:
                    into = into * multiplier
                self.grads[f"hidden_{term}"][rows] = into.to(self.grads[f"hidden_{term}"].dtype)
            if self.needs["weight"]:
                self.grads[f"weight_{term}"] += (grad.t() @ h.to(grad.dtype)).float()
            if self.needs["bias"]:
                self.grads[f"bias_{term}"] += grad.float().sum(0)

    def saved(self) -> list[torch.Tensor]:
        return [
            g.to(self.weight.dtype) if name.startswith(("weight", "bias")) else g
            for name, g in self.grads.items()
        ]

    def layout(self) -> tuple[str, ...]:
        return tuple(self.grads)
