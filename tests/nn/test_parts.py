"""Parts of a model plugged in from a person's own configs (`xfmr.nn.parts`):
docs/architectures.md's "Adding a positional scheme" run as written (its files and its command
line), and an attention and a feed-forward of one's own built from `_target_`; and
`model.qk_norm`, the key added to show what adding one takes."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.docs import block
from helpers.runs import TINY, read_results
from xfmr.nn import build_model
from xfmr.nn.attention import MultiHeadAttention
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.norms import RMSNorm

ROOT = Path(__file__).resolve().parents[2]


def page_files() -> dict[str, tuple[str, str]]:
    """The page's files: the path each is shown under -> its block's id and text."""
    return {
        "my_parts/learned_slopes.py": ("learned-slopes-py", block("learned-slopes-py")),
        "my_configs/pos/learned_slopes.yaml": ("learned-slopes-yaml", block("learned-slopes-yaml")),
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A person's folder with the page's scheme and its config, and nothing else of xfmr's."""
    page = (ROOT / "docs" / "architectures.md").read_text(encoding="utf-8")
    for name, (block_id, text) in page_files().items():
        lang = {"py": "python", "yaml": "yaml"}[name.rsplit(".", 1)[1]]
        assert f"`{name}`:\n\n```{lang} run={block_id}\n" in page, f"the page shows {name}"
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat. the dog sat on the log.\n" * 40)
    return tmp_path


def _train(project: Path, *extra: str):
    words = shlex.split(block("learned-slopes-command"))  # PYTHONPATH=. xfmr-train ARGS
    assert words[:2] == ["PYTHONPATH=.", "xfmr-train"], words
    args = [
        *words[2:],  # --config-dir my_configs pos=learned_slopes, run from `project`
        *TINY,
        "data=text",
        f"data.path={project / 'corpus.txt'}",
        *extra,
    ]
    paths = [str(project), os.environ.get("PYTHONPATH", "")]
    return run_cli(args, project, env={"PYTHONPATH": os.pathsep.join(p for p in paths if p)})


@pytest.mark.slow
def test_the_pages_scheme_trains_with_its_own_option(project: Path) -> None:
    run_dir = project / "run"
    result = _train(project, "model.pos.scale=0.5", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.output
    assert read_results(run_dir)["status"] == "completed"
    config = (run_dir / "config.yaml").read_text()
    assert "_target_: my_parts.learned_slopes.LearnedSlopes" in config
    assert "scale: 0.5" in config
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    slopes = [name for name in state if name.endswith("pos.slopes")]
    assert slopes, "the scheme's parameter is trained and saved"


def test_a_misspelt_scheme_class_is_refused_by_the_config_check(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: the check refuses it before anything is built or written."""
    import xfmr
    from xfmr.errors import UserError

    monkeypatch.syspath_prepend(str(project))
    with pytest.raises(UserError) as refused:
        xfmr.compose(
            "pos=learned_slopes",
            "model.pos._target_=my_parts.nowhere.Slopes",
            f"hydra.run.dir={project / 'refused'}",
            config_dir=project / "my_configs",
        )
    assert "model.pos._target_=my_parts.nowhere.Slopes: no such class" in str(refused.value)
    assert not (project / "refused").exists()


MODULE = '''
import torch
from torch import nn


class GatedAttention(nn.Module):
    """Self-attention with a sigmoid output gate: MultiHeadAttention's arguments, plus its own."""

    def __init__(self, *, d_model, n_heads, bias, gate_bias=0.0, **rest):
        super().__init__()
        from xfmr.nn.attention import MultiHeadAttention

        self.inner = MultiHeadAttention(d_model=d_model, n_heads=n_heads, bias=bias, **rest)
        self.gate = nn.Linear(d_model, d_model)
        self.gate_bias = gate_bias
        self.seen = dict(d_model=d_model, n_heads=n_heads, **rest)

    def init_weights(self):  # after xfmr's own initialisation
        nn.init.constant_(self.gate.bias, self.gate_bias)

    def forward(self, x, **attend):
        return torch.sigmoid(self.gate(x)) * self.inner(x, **attend)


class Doubled(nn.Module):
    """A feed-forward that names only the facts it needs."""

    def __init__(self, *, d_model, d_ff, width=2):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, width * d_ff), nn.Linear(width * d_ff, d_model)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))
'''


@pytest.fixture
def own_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "own_parts.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "own_parts"


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_an_attention_and_a_feed_forward_of_ones_own(own_parts: str, arch: str) -> None:
    config = ModelConfig(
        vocab_size=40,
        arch=arch,
        n_layers=2,
        d_model=32,
        n_heads=4,
        d_ff=48,
        dropout=0.1,
        pos=PosConfig(name="rotary"),
        attention={"_target_": f"{own_parts}.GatedAttention", "gate_bias": 3.0},
        ffn={"_target_": f"{own_parts}.Doubled", "width": 3},
    )
    model = build_model(config)
    blocks = [m for m in model.modules() if type(m).__name__ == "Block"]
    assert blocks and all(type(b.attn).__name__ == "GatedAttention" for b in blocks)
    assert all(type(b.ffn).__name__ == "Doubled" and b.ffn.up.out_features == 144 for b in blocks)
    seen = blocks[0].attn.seen
    assert seen["resid_dropout"] == 0.1 and seen["qk_norm"] == "none", "facts handed in"
    assert torch.allclose(blocks[0].attn.gate.bias, torch.full((32,), 3.0))
    ids = torch.randint(0, 40, (2, 7))
    if arch == "encoder_decoder":
        logits = model(ids, None, ids)
    else:
        logits = model(ids)
    assert logits.shape[:2] == (2, 7) and torch.isfinite(logits).all()


def test_a_part_that_is_no_class_is_refused_before_torch_builds_it() -> None:
    from xfmr.errors import UserError
    from xfmr.nn.checks import check_parts

    config = ModelConfig(vocab_size=40, ffn={"_target_": "nowhere_at_all.Thing"})
    with pytest.raises(UserError, match=r"model.ffn._target_=nowhere_at_all.Thing: no such class"):
        check_parts(config)
    with pytest.raises(ValueError, match="ffn=.* must be null or name a class"):
        ModelConfig(vocab_size=40, ffn={"width": 2})


@torch.no_grad()
@pytest.mark.parametrize("qk_norm", ["rmsnorm", "layernorm"])
def test_qk_norm_normalises_each_heads_q_and_k_before_rotation(qk_norm: str) -> None:
    """With q and k normalised per head, scaling their projections changes nothing: the scores
    no longer grow with the weights (OLMo 2, Qwen3)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=32, n_heads=4, qk_norm=qk_norm, bias=False).eval()
    x = torch.randn(2, 6, 32)
    before = mha(x, is_causal=True)
    mha.qkv.weight[:64] *= 25.0  # the q and k rows
    torch.testing.assert_close(mha(x, is_causal=True), before, rtol=1e-4, atol=1e-5)
    plain = MultiHeadAttention(d_model=32, n_heads=4, bias=False).eval()
    plain.load_state_dict(mha.state_dict(), strict=False)
    assert not torch.allclose(plain(x, is_causal=True), before, atol=1e-3)
    assert (type(mha.q_norm) is RMSNorm) == (qk_norm == "rmsnorm")
    assert mha.q_norm.weight.shape == (8,), "over each head's channels"


def test_qk_norm_is_refused_by_export_until_a_family_maps_it() -> None:
    from xfmr.interop.hf_families import FAMILIES

    gpt2 = FAMILIES["GPT2LMHeadModel"]
    config = ModelConfig(vocab_size=40, qk_norm="rmsnorm")
    assert gpt2.differences(config) == ["qk_norm='rmsnorm'"]
    assert gpt2.nearest(config) == "model.qk_norm=none"
    assert gpt2.differences(ModelConfig(vocab_size=40)) == []


def test_a_checkpoint_from_before_qk_norm_reads_as_none() -> None:
    saved = ModelConfig(vocab_size=40).to_dict()
    del saved["qk_norm"], saved["attention"], saved["ffn"]
    assert ModelConfig.from_dict(saved).qk_norm == "none"
