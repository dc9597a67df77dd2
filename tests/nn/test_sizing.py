"""`model.target_params`: the width chosen brings each architecture within 2% of the target,
counted independently by building the model on the CPU; a target no width reaches is refused
in one line naming the nearest sizes; a resumed run's width is kept while it still serves."""

from __future__ import annotations

import pytest

from xfmr.nn import ModelConfig
from xfmr.nn.config import width_step
from xfmr.nn.models import build_model
from xfmr.nn.sizing import TOLERANCE, count_parameters, sized

VOCAB = 66
SECTIONS = {
    "decoder": {"arch": "decoder", "n_layers": 2, "n_heads": 4},
    "encoder": {"arch": "encoder", "n_layers": 2, "n_heads": 4, "type_vocab_size": 2},
    "encoder_decoder": {"arch": "encoder_decoder", "n_layers": 2, "n_heads": 4},
    "rnn": {"arch": "rnn", "n_layers": 2, "rnn_cell": "lstm", "pos": {"name": "none"}},
    "decoder, rotary, d_ff fixed": {
        "arch": "decoder",
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": 96,
        "pos": {"name": "rotary"},
    },
}


def _built(config: ModelConfig) -> int:
    """Counted apart from the solver: the model built on the CPU, each tensor once."""
    model = build_model(config)
    storages = {p.data_ptr(): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}
    assert all(p.device.type == "cpu" for p in model.parameters())
    return sum(storages.values())


@pytest.mark.parametrize("name", list(SECTIONS))
@pytest.mark.parametrize(("width", "above"), [(48, 0.004), (96, -0.004)])
def test_the_width_chosen_comes_within_two_percent(name: str, width: int, above: float) -> None:
    """A target near the count at `width` (`above` it) chooses that width: the nearest."""
    plain = ModelConfig.from_settings({**SECTIONS[name], "d_model": width}, vocab_size=VOCAB)
    target = round(_built(plain) * (1 + above))
    settings = {**SECTIONS[name], "target_params": target}
    found = sized(settings, vocab_size=VOCAB, build=build_model)
    built = _built(found.config)
    assert (found.config.d_model, found.count) == (width, built)
    assert abs(built / target - 1) <= TOLERANCE
    assert found.config.target_params == target
    if settings.get("d_ff") is None:  # d_ff follows the width chosen
        assert found.config.d_ff == 4 * width
    else:
        assert found.config.d_ff == settings["d_ff"]
    # The nearest width the checks allow: a step either side is further from the target.
    step = width_step(settings)
    assert step == (1 if name == "rnn" else 8 if "rotary" in name else 4)
    for other in (width - step, width + step):
        config = ModelConfig.from_settings({**settings, "d_model": other}, vocab_size=VOCAB)
        assert abs(_built(config) - target) > abs(built - target)


def test_rotary_keeps_each_head_even() -> None:
    settings = {**SECTIONS["decoder, rotary, d_ff fixed"], "n_heads": 3}
    assert width_step(settings) == 6
    plain = ModelConfig.from_settings({**settings, "d_model": 60}, vocab_size=VOCAB)
    found = sized({**settings, "target_params": _built(plain)}, vocab_size=VOCAB, build=build_model)
    assert (found.config.d_model, found.config.head_dim, found.gap) == (60, 20, 0.0)


def test_the_line_says_what_was_chosen() -> None:
    found = sized(
        {**SECTIONS["rnn"], "target_params": 804_224}, vocab_size=VOCAB, build=build_model
    )
    assert found.line() == (
        f"model.target_params=804224: model.d_model={found.config.d_model} gives "
        f"{found.count:,} parameters ({found.gap:+.2%})"
    )
    assert found.config.d_model == 222  # the LSTM experiment's width, as its page records


def test_no_width_within_two_percent_is_refused_naming_the_nearest() -> None:
    # 16 heads: widths step by 16, about 40% apart in parameters at this size.
    settings = {**SECTIONS["decoder"], "n_heads": 16, "target_params": 50_000}
    with pytest.raises(ValueError) as refused:
        sized(settings, vocab_size=VOCAB, build=build_model)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("model.target_params=50000: no model.d_model (a multiple of 16)")
    for width in (16, 32):
        count = _built(ModelConfig.from_settings({**settings, "d_model": width}, vocab_size=VOCAB))
        assert f"model.d_model={width} gives {count:,}" in message
    assert "fewer model.n_heads" in message


def test_a_target_below_the_smallest_model_is_refused() -> None:
    settings = {**SECTIONS["decoder"], "target_params": 100}
    with pytest.raises(ValueError, match=r"model.d_model=4 gives .*; raise model.target_params"):
        sized(settings, vocab_size=VOCAB, build=build_model)


def test_a_resumed_width_is_kept_while_it_serves() -> None:
    settings = {**SECTIONS["rnn"], "target_params": 804_224}
    assert sized(settings, vocab_size=VOCAB, build=build_model).config.d_model == 222
    kept = sized(settings, vocab_size=VOCAB, build=build_model, keep=221)
    assert (kept.config.d_model, kept.kept) == (221, True)
    assert "(kept from the run it resumes)" in kept.line()
    # A width that no longer serves (the target moved far) is solved again.
    far = sized(
        {**settings, "target_params": 400_000}, vocab_size=VOCAB, build=build_model, keep=222
    )
    assert not far.kept and abs(far.gap) <= TOLERANCE


def test_counting_on_the_meta_device_matches_the_cpu() -> None:
    config = ModelConfig.from_settings(SECTIONS["encoder_decoder"], vocab_size=VOCAB)
    assert count_parameters(build_model, config) == _built(config)
