"""Throughput accounting and the precisions a run can train in: the FLOPs-per-token estimate
against a hand count and against FLOPs torch counts, the peak (given, a CPU's measured and
cached one; a GPU's datasheet figure in test_peaks.py), the throughput figures in results.json,
bf16-mixed training on CPU, float16 refused on a CPU, and a compiled run."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.runs import TinyRun, read_results
from xfmr.errors import UserError
from xfmr.nn import ModelConfig, build_model
from xfmr.training import throughput
from xfmr.training.progress_bars import training_figures
from xfmr.training.run_summary import TRAIN_MFU, TRAIN_TOKENS_PER_S, RunSummary
from xfmr.training.throughput import (
    CPU_MATMUL,
    PEAK_CACHE_FILE,
    Peak,
    TrainingFlops,
    cpu_bf16_flags,
    cpu_model,
    device_name,
    matmul_flops,
    measured_peak_flops,
    mfu,
    precision_dtype,
    resolve_peak,
    weight_parameters,
)

pytestmark = pytest.mark.usefixtures("one_thread")

# The estimate leaves out what FlopCounterMode leaves out too (softmax, norms, GELU, the loss),
# and both count the full T x T score matrix; the estimate alone counts norm gains and biases,
# 1.2% (decoder, encoder) to 1.5% (encoder-decoder) here. So the tolerance can be tighter than
# the 10-20% usually quoted for 6N, and tight enough that a wrong convention fails: counting the
# lookup-only token table of an untied model adds 6 * vocab * d_model per token (about 22% here),
# dropping the tied LM head removes as much, halving attention for the causal mask moves the
# total by about 6%, and the cross-attention k/v over the target instead of the source by 4%.
COUNTED_TOLERANCE = 0.03


def _tiny_gpt(**overrides) -> ModelConfig:
    values = dict(
        vocab_size=65,
        n_layers=2,
        n_heads=4,
        d_model=32,
        bias=False,
        tie_embeddings=True,
        pos={"name": "learned", "max_positions": 16},
    )
    return ModelConfig(**{**values, **overrides})


def test_flops_per_token_of_a_tiny_gpt_is_the_hand_count() -> None:
    """nanoGPT's 6N + 12*L*H*Q*T, N without the position table, the tied token table once."""
    config = _tiny_gpt()
    flops = TrainingFlops.of(build_model(config))
    d, layers, T = 32, 2, 16
    per_layer = 2 * d + 3 * d * d + d * d + d * 4 * d + 4 * d * d  # 2 norm gains, qkv, out, ffn
    n = 65 * d + layers * per_layer + d  # tied token table, blocks, final norm gain
    assert n == 26816
    assert flops.weights == n
    assert flops.per_token(T) == 6 * 26816 + 12 * layers * 4 * (d // 4) * T == 173184


def test_weight_parameters_leave_out_lookup_tables_and_keep_an_untied_lm_head() -> None:
    tied = build_model(_tiny_gpt())
    untied = build_model(_tiny_gpt(tie_embeddings=False))
    # Untied: the token table is a lookup (left out), the LM head a separate matrix (counted).
    assert weight_parameters(untied) == weight_parameters(tied)
    assert weight_parameters(tied) == sum(p.numel() for p in tied.parameters()) - 16 * 32


def _counted_flops_per_token(model: torch.nn.Module, run, tokens: int) -> float:
    """FLOPs torch counts for one forward and backward, per token. FlopCounterMode has no
    formula for the CPU's fused attention kernel, so attention runs on the math backend: the
    same two matmuls per head (full T x T, causal or not), as bmm calls the counter sees."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        run(model).float().square().mean().backward()
    return counter.get_total_flops() / tokens


@pytest.mark.parametrize("tie_embeddings", [True, False])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_estimate_is_within_tolerance_of_counted_flops(arch: str, tie_embeddings: bool) -> None:
    B, T = 2, 64
    config = ModelConfig(
        vocab_size=512,
        arch=arch,
        n_layers=2,
        n_heads=4,
        d_model=64,
        tie_embeddings=tie_embeddings,
        pos={"name": "learned", "max_positions": T},
    )
    model = build_model(config)
    ids = torch.randint(0, 512, (B, T))
    counted = _counted_flops_per_token(model, lambda m: m(ids), B * T)
    estimated = TrainingFlops.of(model).per_token(T)
    assert estimated == pytest.approx(counted, rel=COUNTED_TOLERANCE)


def test_encoder_decoder_estimate_is_within_tolerance_of_counted_flops() -> None:
    """Source and target of different lengths: a formula mixing them up is far off."""
    B, S, T = 2, 48, 16
    config = ModelConfig(
        vocab_size=512,
        arch="encoder_decoder",
        n_layers=2,
        n_decoder_layers=1,
        n_heads=4,
        d_model=64,
        pos={"name": "sinusoidal", "max_positions": S},
    )
    model = build_model(config)
    source, target = torch.randint(0, 512, (B, S)), torch.randint(0, 512, (B, T))
    counted = _counted_flops_per_token(model, lambda m: m(source, None, target), B * S)
    batch = {"input_ids": source, "decoder_input_ids": target}
    estimated = TrainingFlops.of(model).per_batch_token(batch)
    assert estimated == pytest.approx(counted, rel=COUNTED_TOLERANCE)


def test_an_rnn_has_no_flops_estimate_and_no_mfu() -> None:
    model = build_model(ModelConfig(vocab_size=65, arch="rnn", pos={"name": "none"}))
    assert TrainingFlops.of(model) is None
    assert mfu(1000.0, None, 1e12) is None


def test_mfu_is_achieved_over_peak_of_all_devices() -> None:
    assert mfu(1000.0, 2e6, 4e9) == pytest.approx(0.5)
    assert mfu(1000.0, 2e6, 4e9, world_size=2) == pytest.approx(0.25)
    assert precision_dtype("bf16-mixed") == torch.bfloat16
    assert precision_dtype("32-true") == torch.float32
    assert precision_dtype("transformer-engine") is None


def test_peak_is_measured_once_and_then_read_from_the_cache(tmp_path: Path) -> None:
    cpu, quiet = torch.device("cpu"), {"size": 128, "count": 2, "max_load": math.inf}
    measured = measured_peak_flops(cpu, torch.float32, cache_dir=tmp_path, **quiet)
    assert measured > 1e6
    cache = tmp_path / PEAK_CACHE_FILE
    (key,) = json.loads(cache.read_text())
    assert "float32" in key and "threads" in key
    cache.write_text(json.dumps({key: 123.0}))  # a value no measurement gives
    assert measured_peak_flops(cpu, torch.float32, cache_dir=tmp_path, **quiet) == 123.0
    other = measured_peak_flops(cpu, torch.bfloat16, cache_dir=tmp_path, **quiet)
    assert other != 123.0 and len(json.loads(cache.read_text())) == 2


def test_a_peak_measured_on_a_busy_cpu_is_not_cached(tmp_path: Path) -> None:
    busy = {"size": 128, "count": 2, "max_load": -1.0}  # any load is too much
    assert measured_peak_flops(torch.device("cpu"), torch.float32, cache_dir=tmp_path, **busy) > 0
    assert not (tmp_path / PEAK_CACHE_FILE).exists()


CUDA = torch.device("cuda")  # only named: Lightning reads a GPU's name, which tests fake


def test_a_given_peak_wins_and_nothing_is_read_or_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", pytest.fail)
    for device in (CUDA, torch.device("cpu")):
        peak = resolve_peak(device, "bf16-mixed", given_tflops=0.5, cache_dir=tmp_path)
        assert peak == Peak(5e11, "throughput.peak_tflops")
    assert not (tmp_path / PEAK_CACHE_FILE).exists()


def test_a_cpu_peak_is_measured_back_to_back_once_and_names_its_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(throughput, "_cpu_load", lambda: 0.0)  # cached on a busy machine too
    cpu = torch.device("cpu")
    cache = tmp_path / PEAK_CACHE_FILE
    # A figure from one 2048^3 product between two synchronisations is not reused.
    cache.write_text(json.dumps({f"{device_name(cpu)} | torch.float32 | 2048x2048": 123.0}))
    peak = resolve_peak(cpu, "32-true", given_tflops=None, cache_dir=tmp_path)
    size, count = CPU_MATMUL
    method = f"{size}^3 float32 matmuls x {count}, back to back"
    assert peak.source == f"measured: {method}, {cpu_model()}, 1 threads"
    assert peak.flops > 1e8 and peak.flops != 123.0
    key = f"{device_name(cpu)} | {method}"
    assert json.loads(cache.read_text())[key] == peak.flops
    cache.write_text(json.dumps({key: 456.0}))  # a value no measurement gives
    assert resolve_peak(cpu, "32-true", given_tflops=None, cache_dir=tmp_path).flops == 456.0


@pytest.mark.parametrize(
    "flags, measured", [((), torch.float32), (("avx512_bf16",), torch.bfloat16)]
)
def test_bf16_on_a_cpu_that_emulates_it_is_measured_in_float32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple, measured: torch.dtype
) -> None:
    dtypes = []
    monkeypatch.setattr(throughput, "cpu_bf16_flags", lambda: flags)
    monkeypatch.setattr(
        throughput, "matmul_flops", lambda device, dtype, **_: dtypes.append(dtype) or 1e9
    )
    peak = resolve_peak(torch.device("cpu"), "bf16-mixed", given_tflops=None, cache_dir=None)
    assert dtypes == [measured] and peak.flops == 1e9
    assert str(measured).removeprefix("torch.") in peak.source
    assert ("emulates bfloat16" in peak.source) == (measured is torch.float32)


def test_the_measured_cpu_peak_agrees_with_timing_many_products_directly() -> None:
    """A figure off by the count of products, or timing one of them, is far outside this."""
    size, count = CPU_MATMUL
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    started = time.perf_counter()
    for _ in range(2 * count):
        torch.mm(a, b)
    direct = 2 * size**3 * 2 * count / (time.perf_counter() - started)
    measured = matmul_flops(torch.device("cpu"), torch.float32)
    assert direct / 3 < measured < direct * 3, (measured / 1e9, direct / 1e9)


def _train(tmp_path: Path, overrides: list[str]) -> dict:
    from xfmr.training.run import run_training

    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            "trainer.max_steps=40",
            "trainer.val_check_interval=20",
            "trainer.limit_val_batches=2",
            "optim.lr=3e-3",
            "schedule.warmup_steps=5",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "throughput.peak_tflops=null",  # measured, where the other tests fix it
            *overrides,
        ],
    )
    return run_training(cfg)


def _expected_flops_per_token(run_dir: Path, block_size: int) -> float:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    model = build_model(ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"]))
    return TrainingFlops.of(model).per_token(block_size)


def test_the_history_counts_training_tokens_and_flops(tiny_run: TinyRun) -> None:
    """Each validation records the tokens trained on so far as tokens/s counts them (every
    position of input_ids, 4 x 16 a step here) and their FLOPs at the figure mfu uses."""
    results = read_results(tiny_run.dir)
    history = results["history"]
    assert [h["step"] for h in history] == [2, 4]
    assert results["tokens_per_step"] == 4 * 16
    assert [h["tokens"] for h in history] == [h["step"] * 4 * 16 for h in history]
    per_token = _expected_flops_per_token(tiny_run.dir, 16)
    assert results["flops_per_token"] == round(per_token)
    for entry in history:
        assert entry["flops"] == pytest.approx(entry["tokens"] * per_token, rel=1e-9)


def test_a_checkpoint_that_did_not_count_tokens_resumes_without_counts() -> None:
    """Counting from the resumed step would understate every later entry: they get none."""
    summary = RunSummary()
    assert summary.state_dict()["tokens"] == 0 and summary.state_dict()["flops"] == 0
    summary.load_state_dict({"best": {}, "history": [{"step": 2, "val/loss": 3.0}]})
    assert summary.state_dict()["tokens"] is None and summary.state_dict()["flops"] is None
    counted = {"best": {}, "history": [], "train_seconds": 1.5, "tokens": 128, "flops": 9e4}
    summary.load_state_dict(counted)
    assert summary.state_dict() == {**counted, "scores": {}}  # no lm-eval scores were kept


def _uniform_loss(run_dir: Path) -> float:
    """The loss of a uniform guess over the run's vocabulary, where training starts."""
    from xfmr.text.tokenizers import TextTokenizer

    return math.log(TextTokenizer.load(run_dir / "tokenizer.json").vocab_size)


class BarProbe(L.Callback):
    """Notes what the progress bar had to show when training ended."""

    shown: dict = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        BarProbe.shown = training_figures(trainer)


@pytest.mark.skipif(cpu_bf16_flags() == (), reason="this CPU has no bf16 matmul instructions")
def test_bf16_mixed_trains_on_cpu_with_a_fused_optimizer_and_reports_mfu(tmp_path: Path) -> None:
    results = _train(
        tmp_path,
        [
            "trainer.precision=bf16-mixed",
            "trainer.accelerator=cpu",
            f"+callbacks.bar_probe._target_={__name__}.BarProbe",
        ],
    )
    losses = [entry["val/loss"] for entry in results["history"]]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0] and losses[-1] < 0.8 * _uniform_loss(tmp_path / "run"), losses
    assert results["metrics"]["val/ppl"] == pytest.approx(math.exp(losses[-1]), rel=1e-3)
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    # Clipped (trainer.gradient_clip_val=1.0) and still fused: bf16 has no loss scale to undo.
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["fused"] is True
    # mfu is tokens/s x FLOPs per token over the peak measured for this CPU in bf16.
    assert results["peak_flops"] > 0
    assert results["flops_per_token"] == round(_expected_flops_per_token(tmp_path / "run", 16))
    expected = results["train_tokens_per_s"] * results["flops_per_token"] / results["peak_flops"]
    assert results["train_mfu"] == pytest.approx(expected, rel=1e-3)  # 4 significant figures
    assert 0.0 < results["train_mfu"] < 1.0 and 0.0 < results["wall_mfu"] < 1.0
    assert {"train/loss", TRAIN_TOKENS_PER_S, TRAIN_MFU} <= BarProbe.shown.keys()
    shown = BarProbe.shown[TRAIN_MFU]
    assert shown.endswith("%") and 0.0 < float(shown[:-1]) < 100


def test_a_configured_peak_is_the_mfu_denominator(tmp_path: Path) -> None:
    results = _train(
        tmp_path, ["throughput.peak_tflops=0.5", "trainer.max_steps=4", "schedule.warmup_steps=2"]
    )
    assert results["peak_flops"] == 5e11
    assert results["peak_flops_source"] == "throughput.peak_tflops"
    expected = results["train_tokens_per_s"] * results["flops_per_token"] / 5e11
    assert results["train_mfu"] == pytest.approx(expected, rel=1e-3)  # 4 significant figures
    assert not (tmp_path / "cache" / PEAK_CACHE_FILE).exists()  # nothing measured


def test_float16_on_a_cpu_is_refused_before_training_naming_bf16(tmp_path: Path, corpus) -> None:
    result = run_cli(
        [
            "size=tiny",
            "data=text",
            f"data.path={corpus}",
            "trainer.accelerator=cpu",
            "trainer.precision=16-mixed",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
    )
    assert result.returncode != 0
    assert "trainer.precision=16-mixed on a CPU" in result.output, result.output
    assert "bf16-mixed" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto picks the GPU here")
def test_float16_with_the_auto_accelerator_and_no_gpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="bf16-mixed"):
        compose_config(tmp_path, ["trainer.precision=16-mixed", "trainer.accelerator=auto"])
    # A GPU run asked for by name is the GPU's business.
    compose_config(tmp_path, ["trainer.precision=16-mixed", "trainer.accelerator=gpu"])


@pytest.mark.slow  # about 40 s alone with a cold compile cache, nearly all compiling
def test_a_compiled_run_trains(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # reduce-overhead: CUDA graphs on a GPU; on a CPU the same compiled step without them. One
    # layer: the compiler's time grows with the graph (65 s for the tiny size's two, cold).
    overrides = ["compile=reduce-overhead", "model.n_layers=1"]
    with caplog.at_level(logging.INFO, logger="xfmr"):
        results = _train(
            tmp_path, [*overrides, "trainer.max_steps=20", "trainer.val_check_interval=10"]
        )
    said = [r.getMessage() for r in caplog.records if "the first step took" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("compile=reduce-overhead: "), said
    losses = [entry["val/loss"] for entry in results["history"]]
    assert losses[-1] < losses[0] and losses[-1] < 0.9 * _uniform_loss(tmp_path / "run"), losses
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    config = ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"])
    names = {f"model.{name}" for name in build_model(config).state_dict()}
    assert names <= set(checkpoint["state_dict"])  # the eager model's own names
    assert not any("_orig_mod" in key for key in checkpoint["state_dict"])
    # A CPU's peak is measured; a GPU's is its datasheet's, or none (and no mfu) for one that
    # no table knows.
    source = results["peak_flops_source"]
    if not torch.cuda.is_available():
        assert source.startswith("measured: ") and results["train_mfu"] > 0
    elif source is None:
        assert results["train_mfu"] is None
    else:
        assert source.startswith("datasheet: ") and results["train_mfu"] > 0
