"""Using a trained run: xfmr-generate, xfmr-eval, xfmr-average and xfmr-attention on tiny runs
trained once per module (in process), the CLIs run in a subprocess as a person runs them."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import run_cli
from helpers.config import compose_config
from xfmr.data.parallel import toy_translation
from xfmr.data.synthetic import sentence
from xfmr.nn import ModelConfig, build_model
from xfmr.text.tokenizers import TextTokenizer

QUIET = ["print_config=false", "callbacks.text_sample=null", "size=tiny"]
OTHER_TEXT = "an old owl watches two quick foxes near the river at night.\n" * 12


def _train(tmp: Path, overrides: list[str]) -> Path:
    from xfmr.training.run import run_training

    cfg = compose_config(tmp, [*QUIET, *overrides])
    run_training(cfg)
    return Path(cfg.paths.output_dir)


def _cli(name: str, args: list[str], cwd: Path):
    return run_cli(args, cwd, module=f"xfmr.cli.{name}")


def _weights(path: Path) -> tuple[torch.nn.Module, dict]:
    """The model of a checkpoint, built and loaded here without xfmr's loader."""
    checkpoint = torch.load(path, weights_only=True)
    model = build_model(ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"]))
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items()}
    model.load_state_dict(state)
    return model.eval(), checkpoint


def _bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU written out here, independent of torchmetrics and sacreBLEU (Papineni et al.
    2002, as sacreBLEU scores by default): clipped n-gram matches for n = 1..4 summed over the
    corpus, their geometric mean precision without smoothing, times the brevity penalty
    exp(1 - r/c) when the c hypothesis tokens are fewer than the r reference tokens; 0-100.
    Tokens are 13a's for this text (lowercase words and ".": punctuation splits off)."""
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        hyp, ref = (re.sub(r"([^\w\s])", r" \1 ", t).split() for t in (hypothesis, reference))
        c, r = c + len(hyp), r + len(ref)
        for n in range(1, 5):
            grams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum((grams & ref_grams).values())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if min(matches) == 0:
        return 0.0
    precision = math.exp(sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / 4)
    return 100 * precision * (1.0 if c >= r else math.exp(1 - r / c))


def _fails_cleanly(result, *needles: str) -> None:
    assert result.returncode != 0, result.output
    assert "Traceback" not in result.output, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory) -> Path:
    """A causal LM (char tokens, learned positions up to 32, blocks of 16) with periodic
    checkpoints at steps 2, 3 and 4."""
    return _train(
        tmp_path_factory.mktemp("decoder"),
        [
            "model.pos.max_positions=32",
            "trainer.max_steps=4",
            "callbacks.periodic_checkpoint.every_n_train_steps=1",
            "callbacks.periodic_checkpoint.save_top_k=3",
        ],
    )


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory) -> Path:
    """An encoder-decoder trained on toy parallel files with a word-level BPE vocabulary."""
    tmp = tmp_path_factory.mktemp("translation")
    rng = random.Random(0)
    sources = [sentence(rng) for _ in range(176)]
    files = {}
    for split, rows in (("train", sources[:160]), ("val", sources[160:])):
        for side, lines in (("source", rows), ("target", [toy_translation(s) for s in rows])):
            files[f"{split}_{side}"] = tmp / f"{split}.{side}"
            files[f"{split}_{side}"].write_text("\n".join(lines) + "\n")
    return _train(
        tmp,
        [
            "arch=encoder_decoder",
            "objective=seq2seq",
            "data=parallel",
            *(f"data.{key}={path}" for key, path in files.items()),
            "tokenizer=bpe",
            "tokenizer.vocab_size=300",
            "trainer.max_steps=4",
        ],
    )


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("encoder"), ["arch=encoder", "objective=mlm"])


# --- xfmr-average -------------------------------------------------------------------------


def test_average_is_the_mean_of_the_newest_checkpoints_by_stored_step(
    decoder_run: Path, tmp_path: Path
) -> None:
    """Four known checkpoints whose names order them differently from their stored steps:
    the newest three by step hold 1, 2 and 6 everywhere, the oldest 100."""
    from xfmr.runs.averaging import average_checkpoints

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    base = torch.load(decoder_run / "checkpoints" / "last.ckpt", weights_only=True)
    for name, step, value in (("1", 40, 1.0), ("2", 30, 2.0), ("3", 10, 100.0), ("4", 20, 6.0)):
        state = {k: torch.full_like(v, value) for k, v in base["state_dict"].items()}
        torch.save(
            {**base, "state_dict": state, "global_step": step},
            run / "checkpoints" / f"step-000000{name}.ckpt",
        )
    result = average_checkpoints(run, last=3)
    averaged = torch.load(run / "checkpoints" / "averaged.ckpt", weights_only=True)
    assert [a["global_step"] for a in averaged["averaged_from"]] == [40, 30, 20]
    assert result["averaged_from"] == averaged["averaged_from"]
    for name, tensor in averaged["state_dict"].items():
        assert torch.equal(tensor, torch.full_like(tensor, 3.0)), name
    assert averaged["optimizer_states"] == [] and averaged["lr_schedulers"] == []
    assert averaged["hyper_parameters"] == base["hyper_parameters"]
    assert averaged["global_step"] == 40


def test_average_cli_writes_the_exact_mean_and_training_resumes_from_it(
    decoder_run: Path, tmp_path: Path
) -> None:
    result = _cli("average", [f"run_dir={decoder_run}", "last=3"], tmp_path)
    assert result.returncode == 0, result.output
    assert "step-0000004.ckpt (step 4)" in result.stdout
    ckpts = decoder_run / "checkpoints"
    averaged = torch.load(ckpts / "averaged.ckpt", weights_only=True)
    sources = [torch.load(ckpts / f"step-000000{s}.ckpt", weights_only=True) for s in (2, 3, 4)]
    for name, tensor in averaged["state_dict"].items():
        stacked = torch.stack([s["state_dict"][name].double() for s in sources])
        assert torch.equal(tensor, stacked.mean(0).to(tensor.dtype)), name
    assert not torch.equal(
        averaged["state_dict"]["model.lm_head.weight"],
        sources[-1]["state_dict"]["model.lm_head.weight"],
    )
    # ckpt_path= accepts it: a fresh optimizer, the step count and weights carried on.
    from xfmr.training.run import run_training

    cfg = compose_config(
        tmp_path,
        [
            *QUIET,
            "model.pos.max_positions=32",
            f"ckpt_path={ckpts / 'averaged.ckpt'}",
            "trainer.max_steps=6",
        ],
    )
    assert run_training(cfg)["step"] == 6

    too_many = _cli("average", [f"run_dir={decoder_run}", "last=9"], tmp_path)
    _fails_cleanly(too_many, "last=9", "holds 3 periodic checkpoints", "step-0000002.ckpt")


# --- xfmr-eval ----------------------------------------------------------------------------


def test_eval_loss_and_perplexity_match_a_direct_computation(
    decoder_run: Path, tmp_path: Path
) -> None:
    """On other text (data.path=...) with the averaged weights: the mean next-token loss over
    the validation blocks of that text, computed here from the checkpoint alone."""
    if not (decoder_run / "checkpoints" / "averaged.ckpt").is_file():
        _cli("average", [f"run_dir={decoder_run}", "last=3"], tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(OTHER_TEXT)
    out = tmp_path / "report.json"
    result = _cli(
        "eval",
        [f"run_dir={decoder_run}", "checkpoint=averaged", f"data.path={other}", f"out={out}"],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    report = json.loads(out.read_text())

    model, _ = _weights(decoder_run / "checkpoints" / "averaged.ckpt")
    tokenizer = TextTokenizer.load(decoder_run / "tokenizer.json")
    val = OTHER_TEXT[int(len(OTHER_TEXT) * 0.9) :]
    ids = torch.tensor(tokenizer.encode(val))
    blocks = torch.stack([ids[i : i + 17] for i in range(0, len(ids) - 16, 16)])  # (N, 17)
    with torch.no_grad():
        logits = model(blocks[:, :-1])
    expected = F.cross_entropy(logits.flatten(0, 1), blocks[:, 1:].flatten()).item()
    assert report["loss"] == pytest.approx(expected, rel=1e-5)
    assert report["perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    assert report["targets"] == blocks[:, 1:].numel()
    assert report["checkpoint"].endswith("averaged.ckpt") and report["global_step"] == 4
    assert report["data"]["path"] == str(other)
    assert "bleu" not in report
    assert f"loss {report['loss']:.4f}" in result.stdout


def test_corpus_bleu_gives_the_values_known_by_hand() -> None:
    """xfmr's corpus BLEU against figures worked out on paper. "the cat sat on the mat" against
    "the cat sat on a mat": 5/6 unigrams, 3/5 bigrams, 2/4 trigrams and 1/3 four-grams match,
    equal lengths, so BLEU = 100 * (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = 100 * 12 ** (-1/4).
    A hypothesis that is the reference's first five of six words matches every n-gram, and the
    brevity penalty alone gives 100 * exp(1 - 6/5). Identical: 100; no four-gram shared: 0."""
    from xfmr.runs.evaluation import corpus_bleu

    cases = [
        (["the cat sat on the mat"], ["the cat sat on a mat"], 100 * 12 ** (-1 / 4)),
        (["the cat sat on the"], ["the cat sat on the mat"], 100 * math.exp(-0.2)),
        (["the cat sat on the mat ."] * 2, ["the cat sat on the mat ."] * 2, 100.0),
        (["the cat sat on the mat"], ["a dog ran under that rug"], 0.0),
        (["the cat sat there"], ["the cat sat on the mat"], 0.0),  # no four-gram in common
    ]
    for hypotheses, references, expected in cases:
        assert _bleu(hypotheses, references) == pytest.approx(expected, abs=1e-9)
        assert corpus_bleu(hypotheses, references) == pytest.approx(expected, abs=1e-4)


def test_eval_bleu_of_the_written_outputs_is_corpus_bleu_computed_here(
    translation_run: Path, tmp_path: Path
) -> None:
    """xfmr-eval's BLEU of the outputs it wrote against references made from them (every other
    line's last word changed, given as data.val_target) is neither 0 nor 100 and equals corpus
    BLEU computed here (`_bleu`). Seeded sampling gives every source its own output (and the
    same one in every batch)."""
    out = tmp_path / "first.json"
    gen = [
        "generation=sample",
        "generation.seed=0",
        "generation.max_new_tokens=12",
        "generation.min_new_tokens=8",
        "generation.batch_size=5",
    ]
    first = _cli("eval", [f"run_dir={translation_run}", f"out={out}", *gen], tmp_path)
    assert first.returncode == 0, first.output
    outputs = (tmp_path / "first.outputs.txt").read_text().splitlines()
    assert len(outputs) == 16 and len(set(outputs)) == 16, outputs
    references = [
        line if i % 2 else " ".join([*line.split()[:-1], "zzz"]) for i, line in enumerate(outputs)
    ]
    (tmp_path / "refs.txt").write_text("\n".join(references) + "\n")
    second_out = tmp_path / "second.json"
    second = _cli(
        "eval",
        [
            f"run_dir={translation_run}",
            f"out={second_out}",
            f"data.val_target={tmp_path / 'refs.txt'}",
            *gen,
        ],
        tmp_path,
    )
    assert second.returncode == 0, second.output
    report = json.loads(second_out.read_text())
    assert (tmp_path / "second.outputs.txt").read_text().splitlines() == outputs
    assert report["bleu"] == pytest.approx(_bleu(outputs, references), abs=1e-4)
    assert 0 < report["bleu"] < 100
    assert report["generation"]["max_new_tokens"] == 12 and report["generation"]["batch_size"] == 5
    assert math.isfinite(report["loss"]) and report["examples"] == 16

    # Batching and sorting by length keep each output with its source: decode two alone.
    from xfmr.generation import GenerationConfig, generate

    model, _ = _weights(translation_run / "checkpoints" / "best.ckpt")
    tokenizer = TextTokenizer.load(translation_run / "tokenizer.json")
    sources = (translation_run.parent / "val.source").read_text().splitlines()
    eos, bos = tokenizer.token_to_id("</s>"), tokenizer.token_to_id("<s>")
    config = GenerationConfig(
        strategy="sample", seed=0, top_p=0.9, max_new_tokens=12, min_new_tokens=8
    )
    for i in (0, 7):
        ids = torch.tensor([[*tokenizer.encode(sources[i]), eos]])
        [[best]] = generate(model, ids, config=config, eos_id=eos, pad_id=0, decoder_start_id=bos)
        visible = [t for t in best.tokens if t not in tokenizer.special_ids()]
        assert tokenizer.decode(visible).strip() == outputs[i]


# --- xfmr-generate ------------------------------------------------------------------------


def test_generate_continues_a_prompt_with_averaged_weights(
    decoder_run: Path, tmp_path: Path
) -> None:
    if not (decoder_run / "checkpoints" / "averaged.ckpt").is_file():
        _cli("average", [f"run_dir={decoder_run}", "last=3"], tmp_path)
    from xfmr.generation import GenerationConfig, generate

    prompt = "the quick"
    args = [f"run_dir={decoder_run}", "checkpoint=averaged", f"input={prompt}"]
    result = _cli("generate", [*args, "generation.max_new_tokens=10"], tmp_path)
    assert result.returncode == 0, result.output
    model, _ = _weights(decoder_run / "checkpoints" / "averaged.ckpt")
    tokenizer = TextTokenizer.load(decoder_run / "tokenizer.json")
    ids = tokenizer.encode(prompt)
    [[best]] = generate(
        model,
        torch.tensor([ids]),
        config=GenerationConfig(max_new_tokens=10),
        eos_id=None,
        pad_id=0,
    )
    assert len(best.tokens) == 10
    assert result.stdout == tokenizer.decode(ids + best.tokens).strip() + "\n"


def test_generate_translates_a_file_in_batches_with_beams(
    translation_run: Path, tmp_path: Path
) -> None:
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("the cat sees a dog.\ntwo owls like the river.\nan old fox.\n")
    base = [f"run_dir={translation_run}", f"input_file={inputs}", "generation.max_new_tokens=6"]
    beams = _cli(
        "generate",
        [
            *base,
            "generation=beam",
            "generation.num_beams=3",
            "generation.n_best=2",
            "generation.batch_size=2",
        ],
        tmp_path,
    )
    assert beams.returncode == 0, beams.output
    groups = beams.stdout.removesuffix("\n").split("\n\n")
    assert len(groups) == 3, beams.stdout
    assert all([line[:3] for line in g.split("\n")] == ["1. ", "2. "] for g in groups), groups
    assert not any(token in beams.stdout for token in ("<s>", "</s>", "<pad>"))


def test_generate_fills_masks_with_an_mlm_encoder(encoder_run: Path, tmp_path: Path) -> None:
    from xfmr.runs.loading import load_run

    text = "the [MASK]uick [MASK]ox"
    result = _cli("generate", [f"run_dir={encoder_run}", f"input={text}"], tmp_path)
    assert result.returncode == 0, result.output
    run = load_run(encoder_run)
    ids = torch.tensor([run.tokenizer.encode(text)])
    mask_id = run.tokenizer.token_to_id("[MASK]")
    assert int((ids == mask_id).sum()) == 2
    with torch.no_grad():
        logits = run.model(ids, torch.ones_like(ids))
    logits[..., sorted(run.tokenizer.special_ids())] = float("-inf")
    filled = torch.where(ids == mask_id, logits.argmax(-1), ids)[0].tolist()
    assert result.stdout == run.tokenizer.decode(filled).strip() + "\n"
    assert "[MASK]" not in result.stdout and result.stdout.startswith("the ")


# --- xfmr-attention -----------------------------------------------------------------------


def test_attention_writes_one_png_per_layer_and_head(translation_run: Path, tmp_path: Path) -> None:
    from matplotlib.image import imread

    out = tmp_path / "maps"
    args = [f"run_dir={translation_run}", "input=the cat sees a dog.", f"out={out}"]
    result = _cli("attention", [*args, "generation.max_new_tokens=5"], tmp_path)
    assert result.returncode == 0, result.output
    files = sorted(out.glob("*.png"))
    # size=tiny: 2 heads; 2 encoder layers (self) + 2 decoder layers (self and cross).
    expected = {
        f"{stack}.blocks.{layer}.{module}-{kind}-head{head}.png"
        for stack, module, kind in (
            ("encoder", "attn", "self"),
            ("decoder", "attn", "self"),
            ("decoder", "cross_attn", "cross"),
        )
        for layer in (0, 1)
        for head in (0, 1)
    }
    assert {f.name for f in files} == expected, [f.name for f in files]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert imread(f).ndim == 3


# --- mistakes -----------------------------------------------------------------------------


def test_a_run_directory_without_a_checkpoint(decoder_run: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.yaml", "tokenizer.json"):
        (bare / name).write_bytes((decoder_run / name).read_bytes())
    result = _cli("generate", [f"run_dir={bare}", "input=the"], tmp_path)
    _fails_cleanly(result, str(bare), "has no checkpoint", "config.yaml, tokenizer.json")


def test_an_input_longer_than_the_model_allows(decoder_run: Path, tmp_path: Path) -> None:
    text = "the quick brown fox jumps over the lazy dog"
    result = _cli("generate", [f"run_dir={decoder_run}", f"input={text}"], tmp_path)
    _fails_cleanly(result, "input ('the quick", f"{len(text)} tokens", "data.block_size=16")


def test_generating_past_the_trained_length_warns_once_and_past_the_table_is_refused(
    decoder_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Learned positions up to 32, trained on blocks of 16: positions 16..31 were never seen."""
    from xfmr.errors import UserError
    from xfmr.runs.inference import (
        check_new_tokens,
        fitted_new_tokens,
        text_task,
        warn_past_training_length,
    )
    from xfmr.runs.loading import load_run

    result = _cli(
        "generate",
        [f"run_dir={decoder_run}", "input=the", "generation.max_new_tokens=20"],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    warning = "runs to 22 positions, past the 16 the model was trained on (data.block_size=16)"
    assert result.stderr.count(warning) == 1, result.stderr
    assert "pos=learned positions past it were never trained" in result.stderr
    assert "generation.max_new_tokens<=14 stays within" in result.stderr

    run = load_run(decoder_run)
    task, rows = text_task(run), [[1, 2, 3]]
    with caplog.at_level("WARNING", logger="xfmr"):
        warn_past_training_length(run, task, rows, 14)
    assert not caplog.records
    # generation.max_new_tokens=null (the default): up to the trained length, at least one.
    assert fitted_new_tokens(run, task, rows) == 14
    assert fitted_new_tokens(run, task, [[1] * 20]) == 1
    with pytest.raises(
        UserError, match="generation.max_new_tokens=31 .* model.pos.max_positions=32"
    ):
        check_new_tokens(run, task, rows, 31)


def _heavy_modules_loaded(args: list[str], cwd: Path) -> list[str]:
    probe = (
        "import sys\n"
        f"sys.argv = ['xfmr-generate', *{args!r}]\n"
        "from xfmr.cli.generate import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True)
    return eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["generation.num_beams=0"], ["generation.num_beams=0", "integer >= 1"]),
        (["generation=sample", "generation.top_p=1.5"], ["generation.top_p=1.5", "(0, 1]"]),
        (["generation=bem"], ["generation='bem'", "beam, greedy, sample"]),
        (["generation.beams=3"], ["generation.beams is not a key", "generation.num_beams"]),
    ],
)
def test_bad_generation_settings_answer_before_torch_loads(
    decoder_run: Path, tmp_path: Path, args: list[str], needles: list[str]
) -> None:
    full = [f"run_dir={decoder_run}", "input=the", *args]
    _fails_cleanly(_cli("generate", full, tmp_path), *needles)
    assert _heavy_modules_loaded(full, tmp_path) == []


def test_missing_run_dir_and_data_keys(decoder_run: Path, tmp_path: Path) -> None:
    _fails_cleanly(_cli("eval", [], tmp_path), "run_dir is not set")
    _fails_cleanly(
        _cli("eval", [f"run_dir={decoder_run}", "data.val_source=x.txt"], tmp_path),
        "data.val_source is not a key of this run's data (TextCorpusDataModule)",
        "path",
    )
    _fails_cleanly(
        _cli("attention", [f"run_dir={tmp_path / 'absent'}", "input=x"], tmp_path),
        "is not a directory",
    )


@pytest.mark.parametrize("name", ["generate", "eval", "average", "attention"])
def test_help_lists_keys_and_choices(name: str, tmp_path: Path) -> None:
    result = _cli(name, ["--help"], tmp_path)
    assert result.returncode == 0, result.output
    assert f"Usage: xfmr-{name} KEY=VALUE" in result.stdout
    assert "run_dir:" in result.stdout
    if name != "average":
        assert "generation: beam, greedy, sample (default: greedy)" in result.stdout
        assert "generation.num_beams: 5" in result.stdout
    else:
        assert "last: 5" in result.stdout
