"""model.parametrization (`xfmr.nn.mup`): sp is the model that was built before the key existed,
bit for bit; µP at its base width is sp; µP's initialisation, attention scale and readout
multiplier at other widths; its folding into an sp model of the same logits; and the settings
it refuses, in one line naming the key."""

from __future__ import annotations

import functools
import hashlib

import pytest
import torch

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.heads import EncoderPretraining, SequenceClassification
from xfmr.nn.models import build_model
from xfmr.nn.mup import Readout, attention_scale, folded, hidden_linears
from xfmr.training.optim import optimizer_groups

pytestmark = pytest.mark.usefixtures("one_thread")
LEARNED = PosConfig(name="learned", max_positions=16)
RELATIVE = PosConfig(name="relative", num_buckets=8, max_distance=16)
T5 = dict(arch="encoder_decoder", attn_scale=False, scale_logits=True, norm="rmsnorm",
          bias=False, pos=RELATIVE)  # fmt: skip
BERT = dict(arch="encoder", type_vocab_size=2, placement="post", embed_norm=True, pos=LEARNED)
# sha256 (first 32 hex digits) of every initial weight, drawn from seed 0, measured with the
# commit before model.parametrization existed. The initial weights only: the forward and the
# optimizer step go through matmul kernels whose last bits may differ from one CPU to another, so
# they are compared with sp given and left out in one process instead.
BEFORE_MUP = {
    "bert": "113353392ffbfb000bd2dbc327322778",
    "classifier": "ea9139f2113b5692b0ab20a0c02b44dc",
    "decoder": "a99d4406c6f99e21237032c11207b995",
    "t5": "98cad9386399e17f1792e9de7a70211d",
}
MODELS = {
    "decoder": (build_model, dict(pos=LEARNED)),
    "t5": (build_model, T5),
    "bert": (EncoderPretraining, BERT),
    "classifier": (
        lambda c: SequenceClassification(c, n_classes=3),
        dict(arch="encoder", pos=PosConfig(name="rotary")),
    ),
}


def _config(**given) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=50, n_layers=2, n_heads=2, d_model=16), **given})


def _forward(model, ids: torch.Tensor) -> torch.Tensor:
    if model.config.arch == "encoder_decoder":
        return model(ids, None, ids)
    out = model(ids)
    return out[0] if isinstance(out, tuple) else out


def _built(name: str, **given):
    make, settings = MODELS[name]
    torch.manual_seed(0)
    return make(_config(dropout=0.0, **settings, **given))


def _digest(model) -> str:
    digest = hashlib.sha256()
    for key, value in model.state_dict().items():
        digest.update(key.encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()[:32]


def _stepped(model) -> list[torch.Tensor]:
    """The logits, then every weight after one AdamW step through `optimizer_groups`."""
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 8))
    adamw = functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
    optimizer = torch.optim.AdamW(optimizer_groups(model, adamw), lr=1e-2)
    out = _forward(model, ids)
    out.float().pow(2).mean().backward()
    optimizer.step()
    return [out.detach(), *(v.clone() for v in model.state_dict().values())]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sp_is_the_model_before_the_key_existed_bit_for_bit(name: str) -> None:
    """The initial weights, with the key left out and given as sp (and a base width, which sp
    does not read), are those of the code before µP; its forward and one optimizer step are
    the same with the key given as without; sp has no readout multiplier and SDPA's own
    attention scale, the code paths of before."""
    plain, given = _built(name), _built(name, parametrization="sp", mup_base_width=8)
    assert _digest(plain) == _digest(given) == BEFORE_MUP[name]
    assert all(torch.equal(a, b) for a, b in zip(_stepped(plain), _stepped(given), strict=True))
    readouts = [m for m in given.modules() if isinstance(m, Readout)]
    assert all(m.multiplier is None for m in readouts)
    assert attention_scale(given.config) == (None if given.config.attn_scale else 1.0)


@pytest.mark.parametrize("name", sorted(MODELS))
@torch.no_grad()
def test_mup_at_its_base_width_is_sp(name: str) -> None:
    make, settings = MODELS[name]
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(1))
    outputs = []
    for given in ({}, dict(parametrization="mup", mup_base_width=16)):
        torch.manual_seed(0)
        outputs.append(_forward(make(_config(**settings, **given)).eval(), ids))
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=1e-6)


def test_mup_draws_hidden_matrices_at_std_over_sqrt_m_and_the_rest_as_sp() -> None:
    """At m = 256 / 16 = 16 the hidden matrices' std is a quarter of sp's; embeddings and the
    readout keep init_std; the readout multiplies by 1/16."""
    torch.manual_seed(0)
    config = _config(d_model=256, n_layers=1, parametrization="mup", mup_base_width=16, pos=LEARNED)
    model = build_model(config)
    qkv = model.backbone.blocks[0].attn.qkv.weight
    assert qkv.std().item() == pytest.approx(0.02 / 4, rel=0.02)
    assert model.backbone.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert isinstance(model.lm_head, Readout) and model.lm_head.multiplier == 1 / 16
    assert model.lm_head not in hidden_linears(model)
    assert model.lm_head.weight is model.backbone.tok_emb.weight


@pytest.mark.parametrize("attn_scale", [True, False])
def test_the_attention_scale_is_one_over_d_head_equal_to_sp_at_the_base(attn_scale) -> None:
    """sqrt(base_d_head) / d_head (T5, no sp scale: base_d_head / d_head)."""
    at = {
        d: attention_scale(
            _config(
                d_model=d,
                n_heads=4,
                attn_scale=attn_scale,
                parametrization="mup",
                mup_base_width=32,
            )  # fmt: skip
        )
        for d in (32, 128)
    }
    sp = 8**-0.5 if attn_scale else 1.0
    assert at[32] == pytest.approx(sp)
    assert at[128] == pytest.approx(sp * 8 / 32)  # d_head 8 -> 32: a quarter, not a half


@pytest.mark.parametrize(
    "settings",
    [dict(pos=LEARNED), dict(pos=PosConfig(name="rotary"), qk_norm="layernorm"), T5, BERT],
    ids=["decoder", "qk_norm", "t5", "bert"],
)
@torch.no_grad()
def test_folding_the_multipliers_gives_an_sp_model_of_the_same_logits(settings) -> None:
    torch.manual_seed(0)
    config = _config(d_model=48, n_heads=4, parametrization="mup", mup_base_width=16, **settings)
    model = build_model(config).eval()
    sp_config, state = folded(model)
    assert sp_config.parametrization == "sp" and not sp_config.scale_logits
    sp = build_model(sp_config).eval()
    sp.load_state_dict(state)
    ids = torch.randint(0, 50, (2, 10))
    torch.testing.assert_close(_forward(sp, ids), _forward(model, ids), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        (dict(parametrization="mup"), "parametrization='mup' needs mup_base_width"),
        (dict(parametrization="mup", mup_base_width=15), "mup_base_width=15 is not divisible"),
        (
            dict(parametrization="mup", mup_base_width=16, embed_scale=True),
            "parametrization='mup' with embed_scale=true",
        ),
        (dict(parametrization="mup", mup_base_width=16, arch="rnn"), "an rnn has no µP rule"),
        (dict(parametrization="mu"), "parametrization='mu' is not one of ['sp', 'mup']"),
        (dict(mup_base_width=0), "mup_base_width=0 must be a positive integer"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line(given, refusal) -> None:
    with pytest.raises(ValueError) as refused:
        _config(**given)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


def test_an_rnn_s_config_section_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"^model\.parametrization='mup' applies to arch in"):
        ModelConfig.from_section({"arch": "rnn", "parametrization": "mup"})
