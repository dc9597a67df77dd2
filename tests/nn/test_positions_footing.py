"""Every positional scheme learns in the decoder of experiment=nanogpt_shakespeare_char: none
is left at the unigram loss because its signal drowns the token (unit sinusoids on embeddings
drawn at std 0.02 did), and the sinusoids start at the token embeddings' scale in every
architecture's default composition."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from xfmr.nn.config import POS_NAMES, ModelConfig
from xfmr.nn.models import build_model
from xfmr.paths import config_dir

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = 300
BLOCK, BATCH = 32, 8
MARGIN = 0.3  # nats below the unigram loss that count as learning more than letter frequencies


def sections(overrides: list[str]) -> dict:
    """The composed config's model section (positions under it), resolved."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    return {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("model",)}


def words_corpus() -> str:
    """Made-up words of two to seven letters: a letter says much about the next one within a
    word, and the letters' frequencies alone (the unigram loss) say little."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(150)]
    return " ".join(rng.choice(words) for _ in range(20_000))


def unigram_loss(text: str) -> float:
    counts = Counter(text)
    return -sum(c / len(text) * math.log(c / len(text)) for c in counts.values())


def trained_loss(pos: str, ids: torch.Tensor, vocab_size: int) -> float:
    """Validation loss of the experiment's decoder (shrunk to size=tiny) after STEPS of AdamW."""
    found = sections(
        [
            "experiment=nanogpt_shakespeare_char",
            "data.path=unused",
            f"pos={pos}",
            "size=tiny",
            "data.block_size=32",
        ]
    )
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_settings(found["model"], vocab_size=vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)
    split = int(0.9 * len(ids))
    generator = torch.Generator().manual_seed(0)

    def batch(low: int, high: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(low, high - BLOCK - 1, (BATCH,), generator=generator)
        windows = torch.stack([ids[s : s + BLOCK + 1] for s in starts])  # (B, T + 1)
        return windows[:, :-1], windows[:, 1:]

    for _ in range(STEPS):
        inputs, targets = batch(0, split)
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        losses = []
        for _ in range(8):
            inputs, targets = batch(split, len(ids))
            logits = model(inputs).flatten(0, 1)
            losses.append(torch.nn.functional.cross_entropy(logits, targets.flatten()).item())
    return sum(losses) / len(losses)


def test_every_scheme_learns_well_below_the_unigram_loss() -> None:
    text = words_corpus()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    unigram = unigram_loss(text)
    losses = {pos: trained_loss(pos, ids, len(chars)) for pos in POS_NAMES}
    stuck = {pos: round(loss, 3) for pos, loss in losses.items() if loss > unigram - MARGIN}
    assert not stuck, f"unigram loss {unigram:.3f}; no better than it: {stuck}"


@pytest.mark.parametrize(
    ("arch", "embed_scale"),
    [("decoder", False), ("encoder", False), ("encoder_decoder", False), ("encoder_decoder", True)],
)
def test_sinusoids_start_at_the_token_embeddings_scale(arch: str, embed_scale: bool) -> None:
    """The RMS of what the sinusoids add is that of the token embeddings they join, times
    1/sqrt(2) (a sine and a cosine per frequency), as in Vaswani et al.: never 35 times it."""
    found = sections(
        [f"arch={arch}", "pos=sinusoidal", "size=tiny", f"model.embed_scale={embed_scale}"]
    )
    config = ModelConfig.from_settings(found["model"], vocab_size=500)
    torch.manual_seed(0)
    model = build_model(config)
    stack = next(m for m in model.modules() if hasattr(m, "tok_emb"))
    ids = torch.arange(500)[None]  # (1, 500)
    tokens = stack.tok_emb(ids) * (config.d_model**0.5 if embed_scale else 1.0)
    sinusoids = stack.pos.embed(torch.zeros(1, 64, config.d_model))
    ratio = sinusoids.pow(2).mean().sqrt() / tokens.pow(2).mean().sqrt()
    assert ratio.item() == pytest.approx(2**-0.5, rel=0.1)
