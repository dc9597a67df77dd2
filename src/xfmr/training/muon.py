"""`optim=muon`: Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/) on the
matrices of the transformer blocks, AdamW on the rest, as one torch optimizer: the split of
Jordan's code and of Moonlight's (Liu et al. 2025, "Muon is Scalable for LLM Training").

Muon takes the weight of every nn.Linear inside a transformer block (`xfmr.nn.layers.Block`):
the attention's q/k/v and output projections (self- and cross-attention) and the feed-forward's
up and down projections. AdamW takes the rest: the token, position and segment embeddings, the
LM head (tied to the embedding, one parameter, or not: an output layer, which Jordan leaves to
AdamW), the task heads, the norms' gains, every bias and every parameter that is not 2-D.

xfmr fuses q, k and v into one `qkv` Linear (cross-attention's k and v into `kv`), and Muon
orthogonalises each fused matrix whole. modded-nanogpt's later records orthogonalise q, k and v
apart; torch.optim.Muon takes whole 2-D parameters, and doing so here would need either three
parameters (another checkpoint layout, and Hugging Face's mapping with it) or a Muon step of
xfmr's own. With `adjust_lr_fn=match_rms_adamw` the update's RMS is 0.2 * lr whatever the
matrix's shape, the fused one's included.

One optimizer rather than two: the training step, the non-finite guard, clipping, the schedule
(LambdaLR scales every group's lr by one factor: Muon's and AdamW's alike) and Lightning's
checkpoints each see one optimizer, whose `param_groups` and `state` are those of the
torch.optim.Muon and torch.optim.AdamW inside it. Muon's update is deterministic given the
gradient, so accumulation and DDP (which replicates whole parameters) change nothing; FSDP hands
each process a shard of each matrix, which Muon cannot orthogonalise (refused by the config,
`xfmr.config.optim.OptimConfig.check_applies`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from xfmr.nn.layers import Block

# The roles of `muon_param_groups`, in the order its groups come (a checkpoint's order).
MUON, DECAYED, NOT_DECAYED = "muon", "decayed", "not_decayed"


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The parameters Muon takes: the weight of each nn.Linear inside a transformer block (a
    part of your own included), trainable. A 2-D parameter of a block that is not a Linear's
    weight (an embedding, a raw nn.Parameter) stays with AdamW."""
    found: dict[int, nn.Parameter] = {}
    for block in model.modules():
        if not isinstance(block, Block):
            continue
        for layer in block.modules():
            if isinstance(layer, nn.Linear) and layer.weight.requires_grad:
                found[id(layer.weight)] = layer.weight
    return list(found.values())


def muon_param_groups(model: nn.Module, *, backbone_lr_scale: float = 1.0) -> list[dict]:
    """`model`'s trainable parameters in groups for `MuonWithAdamW`: Muon's (`hidden_matrices`),
    then AdamW's with weight decay (embeddings, heads: 2-D and more), then AdamW's without
    (norm gains, biases). With `backbone_lr_scale` other than 1, the parameters under
    `model.backbone` get groups of their own at that share of the lr (fine-tuning)."""
    hidden = {id(p) for p in hidden_matrices(model)}
    backbone = getattr(model, "backbone", None) if backbone_lr_scale != 1.0 else None
    in_backbone = {id(p) for p in backbone.parameters()} if backbone is not None else set()
    groups: dict[tuple[bool, str], list[nn.Parameter]] = {}
    for param in model.parameters():  # a tied weight comes once
        if not param.requires_grad:
            continue
        role = MUON if id(param) in hidden else DECAYED if param.dim() >= 2 else NOT_DECAYED
        groups.setdefault((id(param) in in_backbone, role), []).append(param)
    return [
        {
            "params": groups[(backbone_part, role)],
            "muon": role == MUON,
            "decay": role != NOT_DECAYED,
            "lr_scale": backbone_lr_scale if backbone_part else 1.0,
        }
        for backbone_part in (False, True)
        for role in (MUON, DECAYED, NOT_DECAYED)
        if (backbone_part, role) in groups
    ]


class MuonWithAdamW(torch.optim.Optimizer):
    """torch.optim.Muon on the groups marked `muon`, torch.optim.AdamW on the others, stepped
    together as one optimizer.

    Args:
        params: groups as `muon_param_groups` makes them: each with `muon` (which optimizer),
            `decay` (whether weight decay applies) and `lr_scale` (its share of the lr).
        lr: Muon's learning rate.
        adamw_lr: the AdamW groups' learning rate.
        weight_decay: decoupled weight decay, Muon's and AdamW's (each step multiplies a
            matrix by 1 - lr * weight_decay); never on norm gains or biases.
        momentum: Muon's momentum: buf = momentum * buf + (1 - momentum) * grad.
        nesterov: Muon orthogonalises grad + momentum * (buf - grad) rather than buf.
        ns_steps: Newton-Schulz iterations that orthogonalise each update.
        adjust_lr_fn: the lr each matrix's update takes: "match_rms_adamw" (Moonlight: lr * 0.2
            * sqrt(max(rows, cols)), the update's RMS AdamW's, so Muon can share AdamW's lr
            and weight decay) or "original" (Jordan's: lr * sqrt(max(1, rows / cols)), with
            an lr near 0.02).
        betas: the AdamW groups' betas (optim=adamw's key, so an experiment's betas carry over).
        eps: the AdamW groups' eps.
        fused: AdamW's fused kernel, as optim=adamw has it (None: torch's choice).
    """

    def __init__(
        self,
        params: Iterable[dict[str, Any]],
        *,
        lr: float = 1e-3,
        adamw_lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: str = "match_rms_adamw",
        betas: Sequence[float] = (0.9, 0.99),
        eps: float = 1e-8,
        fused: bool | None = True,
    ) -> None:
        groups = [dict(group) for group in params]
        for group in groups:
            group["lr"] = (lr if group["muon"] else adamw_lr) * group.get("lr_scale", 1.0)
            group["weight_decay"] = weight_decay if group.get("decay", True) else 0.0
        hidden = [g for g in groups if g["muon"]]
        rest = [g for g in groups if not g["muon"]]
        self._muon = self._adamw = None
        if hidden:
            self._muon = torch.optim.Muon(
                hidden,
                lr=lr,
                weight_decay=weight_decay,
                momentum=momentum,
                nesterov=nesterov,
                ns_steps=ns_steps,
                adjust_lr_fn=adjust_lr_fn,
            )
        if rest:
            self._adamw = torch.optim.AdamW(
                rest,
                lr=adamw_lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                fused=fused,
            )
        super().__init__([*hidden, *rest], {"lr": lr, "weight_decay": weight_decay})
        self._share()

    def _share(self) -> None:
        """The inner optimizers step this one's groups and keep their state in its `state`
        (their parameters apart), so that `state_dict` and `load_state_dict`, the schedule and
        the guard see one optimizer."""
        count = len(self._muon.param_groups) if self._muon is not None else 0
        if self._muon is not None:
            self._muon.param_groups, self._muon.state = self.param_groups[:count], self.state
        if self._adamw is not None:
            self._adamw.param_groups, self._adamw.state = self.param_groups[count:], self.state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # torch's load makes new groups and a new state; the inner optimizers follow them.
        super().load_state_dict(state_dict)
        self._share()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for inner in (self._muon, self._adamw):
            if inner is not None:
                inner.step()
        return loss
