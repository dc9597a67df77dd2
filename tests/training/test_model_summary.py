"""The model summary a run prints: Lightning's layer table without its FLOPs column (0 for
every xfmr module), one line of training FLOPs per token where the architecture has an
estimate, parameters sized as they are held (no precision warning under bf16-mixed), and
nothing when trainer.enable_model_summary is false."""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary

from helpers.config import compose_config
from xfmr.nn import ModelConfig, build_model
from xfmr.training import model_summary
from xfmr.training.model_summary import format_flops, training_flops_line
from xfmr.training.throughput import TrainingFlops

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # each test trains

BLOCK_SIZE = 16  # compose_config's data.block_size
FLOPS_LINE = re.compile(
    r"Training FLOPs: ([\d.]+) (\w?)FLOP per token "
    rf"\(6N \+ 12\*L\*d\*T at T={BLOCK_SIZE}, data\.block_size\), ([\d.]+) (\w?)FLOP per batch "
    rf"of 4 x {BLOCK_SIZE} tokens"
)
SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


class SummaryProbe(L.Callback):
    """Notes the model summaries in the trainer's callbacks, Lightning's and xfmr's."""

    found: list[type] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        kinds = (LightningModelSummary, model_summary.ModelSummary)
        SummaryProbe.found = [type(c) for c in trainer.callbacks if isinstance(c, kinds)]


def _train(tmp_path: Path, overrides: list[str]) -> dict:
    from xfmr.training.run import run_training

    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            "trainer.enable_model_summary=true",
            f"+callbacks.summary_probe._target_={__name__}.SummaryProbe",
            *overrides,
        ],
    )
    return run_training(cfg)


def _printed(capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> str:
    """What the run showed: rich prints the table to the console."""
    captured = capsys.readouterr()
    return captured.out + captured.err + caplog.text


def _trained_model(tmp_path: Path) -> torch.nn.Module:
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    return build_model(ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"]))


def _figure(number: str, prefix: str) -> float:
    return float(number) * SI[prefix]


def test_the_summary_shows_training_flops_per_token_and_no_flops_column(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    results = _train(tmp_path, [])
    printed = _printed(capsys, caplog)
    assert SummaryProbe.found == [model_summary.ModelSummary]  # Lightning added none of its own
    assert "Total params" in printed and "Params" in printed
    assert "Total FLOPs" not in printed and "Total Flops" not in printed
    assert not re.search(r"[┃|] *FLOPs", printed), printed  # no column
    per_token, prefix, per_batch, batch_prefix = FLOPS_LINE.search(printed).groups()
    expected = TrainingFlops.of(_trained_model(tmp_path)).per_token(BLOCK_SIZE)
    assert _figure(per_token, prefix) == pytest.approx(expected, rel=5e-3)  # 3 digits shown
    assert _figure(per_batch, batch_prefix) == pytest.approx(expected * 4 * BLOCK_SIZE, rel=5e-3)
    assert results["flops_per_token"] == round(expected)  # the figure mfu divides by


def test_an_rnn_summary_has_no_flops_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    _train(tmp_path, ["arch=rnn"])
    printed = _printed(capsys, caplog)
    assert "Total params" in printed
    assert "Training FLOPs" not in printed, printed


def test_bf16_mixed_sizes_float32_parameters_without_a_precision_warning(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
    recwarn: pytest.WarningsRecorder,
) -> None:
    _train(tmp_path, ["trainer.precision=bf16-mixed", "trainer.accelerator=cpu"])
    printed = _printed(capsys, caplog)
    warned = [str(w.message) for w in recwarn if "model summary" in str(w.message)]
    assert not warned
    assert "not supported by the model summary" not in printed
    parameters = sum(p.numel() for p in _trained_model(tmp_path).parameters())
    size = float(re.search(r"params size \(MB\)\W*([\d.]+)", printed).group(1))
    assert size == pytest.approx(parameters * 4 / 1e6, abs=1e-3)  # float32 under autocast


def test_no_summary_when_it_is_disabled(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    _train(tmp_path, ["trainer.enable_model_summary=false"])
    printed = _printed(capsys, caplog)
    assert SummaryProbe.found == [model_summary.ModelSummary]
    assert "Total params" not in printed and "Training FLOPs" not in printed


def test_without_a_fixed_length_the_line_gives_the_terms_not_a_figure() -> None:
    """Data whose batches vary in length (pairs, labelled text) has no T before a batch."""
    decoder = TrainingFlops(arch="decoder", d_model=64, n_layers=2, n_decoder_layers=0, weights=10)
    assert training_flops_line(decoder, None) == (
        "Training FLOPs: 6N = 60 FLOP per token plus 12*L*d*T = 1536*T (T, the batch's "
        "length, known at the first batch)"
    )
    seq2seq = TrainingFlops(
        arch="encoder_decoder",
        d_model=64,
        n_layers=2,
        n_decoder_layers=2,
        weights=2000,
        source_weights=1000,
    )
    assert "6N = 6 KFLOP per source token and 12 KFLOP per target token" in training_flops_line(
        seq2seq, None
    )
    assert format_flops(173184) == "173 KFLOP" and format_flops(2.5e15) == "2.5 PFLOP"


class _Layers(L.LightningModule):
    """Layers to a depth of two, one in eval mode, and a parameter of its own in none."""

    def __init__(self, example: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1).eval())
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.example_input_array = torch.zeros(2, 5, dtype=torch.long) if example else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed(ids)) * self.scale.sum()


@pytest.mark.parametrize("example", [False, True])
@pytest.mark.parametrize("max_depth", [1, 2, -1])
def test_the_table_is_lightnings_own_but_for_its_flops_column(
    max_depth: int, example: bool
) -> None:
    """Lightning makes its table in a private method (`_get_summary_data`): the reference xfmr's
    table, made from the summary's public properties, must match cell for cell."""
    from lightning.pytorch.utilities.model_summary import summarize

    module = _Layers(example)
    summary = summarize(module, max_depth=max_depth)
    lightnings = [(h, cells) for h, cells in summary._get_summary_data() if h != "FLOPs"]
    assert model_summary.summary_columns(summary, module) == lightnings
    if max_depth == 1:  # deeper, Lightning counts a block's layers twice and adds no row
        assert "other params" in lightnings[1][1]  # the module's own parameter: a row of its own
