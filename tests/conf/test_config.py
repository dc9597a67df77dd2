"""The shipped config tree composes, and the nanoGPT experiment says what nanoGPT does."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from helpers.config import checked, model_of
from xfmr.errors import UserError
from xfmr.objectives.registry import objective_facts, objectives
from xfmr.paths import config_dir
from xfmr.ranges import warmup_length
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

GROUPS = [
    "arch",
    "size",
    "pos",
    "objective",
    "data",
    "tokenizer",
    "optim",
    "schedule",
    "trainer",
    "logger",
]


def _compose(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        paths = [
            "paths.root_dir=/tmp/xfmr-test-config",
            "paths.output_dir=/tmp/xfmr-test-config/run",
        ]
        return compose(config_name="train", overrides=[*paths, *overrides])


def _choices(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_choice_composes_and_passes_checks(group: str, tmp_path) -> None:
    for choice in _choices(group):
        overrides = [f"{group}={choice}"]
        if group == "objective":  # with an architecture the objective can train
            facts = objectives()[choice]
            overrides.append(f"arch={facts.archs[0]}")
            if facts.reads == "pairs":
                overrides.append("data=synthetic_translation")
            if facts.reads == "labelled":
                (tmp_path / "l.tsv").write_text("sentence\tlabel\nok\t1\n")
                overrides += ["data=delimited", f"data.train_path={tmp_path / 'l.tsv'}"]
                overrides.append(f"data.val_path={tmp_path / 'l.tsv'}")
            if facts.reads == "tagged":
                (tmp_path / "t.txt").write_text("EU B-ORG\nrejects O\n")
                overrides += ["data=conll", f"data.train_path={tmp_path / 't.txt'}"]
                overrides.append(f"data.val_path={tmp_path / 't.txt'}")
            if facts.reads == "questions":
                (tmp_path / "q.json").write_text('{"data": []}')
                overrides += ["data=squad", f"data.train_path={tmp_path / 'q.json'}"]
                overrides.append(f"data.val_path={tmp_path / 'q.json'}")
            if facts.reads == "documents":
                (tmp_path / "d.txt").write_text("a b.\nc d.\n\ne f.\n")
                overrides += ["data=documents", f"data.path={tmp_path / 'd.txt'}"]
        if group == "data" and choice == "squad":
            (tmp_path / "q.json").write_text('{"data": []}')
            overrides += ["objective=qa", "arch=encoder"]
            overrides += [f"data.train_path={tmp_path / 'q.json'}"]
            overrides.append(f"data.val_path={tmp_path / 'q.json'}")
        if group == "data" and choice == "documents":
            (tmp_path / "d.txt").write_text("a b.\nc d.\n\ne f.\n")
            overrides += ["objective=mlm_nsp", "arch=encoder", f"data.path={tmp_path / 'd.txt'}"]
        if group == "data" and choice == "conll":
            (tmp_path / "t.txt").write_text("EU B-ORG\nrejects O\n")
            overrides += ["objective=tagging", "arch=encoder"]
            overrides += [
                f"data.train_path={tmp_path / 't.txt'}",
                f"data.val_path={tmp_path / 't.txt'}",
            ]
        if group == "data" and choice == "delimited":
            (tmp_path / "l.tsv").write_text("sentence\tlabel\nok\t1\n")
            overrides += ["objective=classification", "arch=encoder"]
            overrides += [
                f"data.train_path={tmp_path / 'l.tsv'}",
                f"data.val_path={tmp_path / 'l.tsv'}",
            ]
        if group == "data" and choice in ("parallel", "synthetic_translation"):
            overrides += ["objective=seq2seq", "arch=encoder_decoder"]
            for key in ("train_source", "train_target", "val_source", "val_target"):
                if choice == "parallel":
                    (tmp_path / key).write_text("a sentence\n")
                    overrides.append(f"data.{key}={tmp_path / key}")
        if group == "tokenizer" and choice == "pretrained":  # the check loads the file
            char = train_tokenizer(TokenizerSpec(kind="char"), iter(["some text"]))
            char.save(tmp_path / "tokenizer.json")
            overrides.append(f"tokenizer.path={tmp_path / 'tokenizer.json'}")
        if group == "data" and choice == "text":
            corpus = tmp_path / "c.txt"
            corpus.write_text("some text\n")
            overrides.append(f"data.path={corpus}")
        if group == "data" and choice == "hf":  # data.kind=text serves the default clm
            overrides.append("data.path=json")  # a dataset builder, not a file: nothing loads
        cfg = _compose(overrides)
        model = model_of(cfg, vocab_size=10)
        assert model.d_model % model.n_heads == 0
        if group != "arch" or model.arch in objectives()["clm"].archs:  # default: clm
            checked(cfg)


def test_nanogpt_experiment_matches_nanogpt_cpu_run() -> None:
    cfg = _compose(["experiment=nanogpt_shakespeare_char"])
    model = model_of(cfg, vocab_size=65)
    assert (model.n_layers, model.n_heads, model.d_model, model.d_ff) == (4, 4, 128, 512)
    assert (model.dropout, model.bias, model.placement, model.activation) == (
        0.0,
        False,
        "pre",
        "gelu",
    )
    assert model.tie_embeddings and model.pos.name == "learned" and model.pos.max_positions == 64
    assert cfg.tokenizer.kind == "char"
    assert (cfg.data.block_size, cfg.data.batch_size, cfg.data.val_fraction) == (64, 12, 0.1)
    assert (
        cfg.optim.lr == 1e-3
        and list(cfg.optim.betas) == [0.9, 0.99]
        and cfg.optim.weight_decay == 0.1
    )
    warmup = warmup_length(cfg.schedule.warmup_steps, cfg.schedule.warmup_ratio, 2000)
    assert warmup == 100 and cfg.schedule.min_lr_ratio * cfg.optim.lr == pytest.approx(1e-4)
    assert cfg.trainer.max_steps == 2000 and cfg.trainer.gradient_clip_val == 1.0
    assert (
        cfg.trainer.precision == "auto"
    )  # float32 on a CPU; on a GPU bf16 if it has it, as nanoGPT


def test_check_rejects_learned_positions_shorter_than_blocks() -> None:
    cfg = _compose(["pos=learned", "model.pos.max_positions=32", "data.block_size=64"])
    with pytest.raises(UserError, match="data.block_size=64 .* model.pos.max_positions=32"):
        checked(cfg)
    checked(_compose(["pos=sinusoidal", "data.block_size=2048"]))


def test_unknown_model_key_names_valid_keys() -> None:
    cfg = OmegaConf.create(OmegaConf.to_container(_compose([])))  # as a saved config.yaml reads
    cfg.model.n_layer = 3
    with pytest.raises(
        UserError, match="model.n_layer is not a model key: did you mean model.n_layers"
    ):
        checked(cfg)


@pytest.mark.parametrize(
    ("arch", "key", "value"),
    [
        ("decoder", "embed_scale", True),
        ("encoder", "embed_scale", True),
        ("encoder_decoder", "type_vocab_size", 2),
        ("encoder_decoder", "n_decoder_layers", 3),
        ("rnn", "rnn_cell", "gru"),
    ],
)
def test_architecture_keys_are_set_without_a_plus(arch: str, key: str, value) -> None:
    cfg = _compose([f"arch={arch}", f"model.{key}={value}"])  # Hydra takes it without `+`
    assert getattr(model_of(cfg, vocab_size=8), key) == value


@pytest.mark.parametrize(
    ("arch", "key", "value"),
    [
        ("decoder", "rnn_cell", "gru"),
        ("rnn", "embed_norm", True),
        ("encoder", "scale_logits", True),
    ],
)
def test_a_key_the_architecture_would_ignore_is_refused(arch: str, key: str, value) -> None:
    cfg = _compose([f"arch={arch}", f"model.{key}={value}"])
    with pytest.raises(UserError, match=f"model.{key}=.* applies to arch in .* not arch={arch}"):
        model_of(cfg, vocab_size=8)


def test_base_size_is_the_papers_base_transformer() -> None:
    """size=base with arch=encoder_decoder: 6+6 layers, d 512, FFN 2048, 8 heads, ~63M params
    with a shared 37k vocabulary (the paper reports 65M)."""
    import torch

    from xfmr.nn import build_model

    cfg = _compose(["arch=encoder_decoder", "size=base", "pos=sinusoidal"])
    model = model_of(cfg, vocab_size=37000)
    assert (model.n_layers, model.n_decoder_layers, model.d_model, model.d_ff, model.n_heads) == (
        6,
        6,
        512,
        2048,
        8,
    )
    with torch.device("meta"):
        n_parameters = build_model(model).num_parameters()
    print(f"base Transformer parameters: {n_parameters:,}")
    assert 63_000_000 <= n_parameters <= 65_000_000


def test_rnn_arch_switches_positions_off() -> None:
    cfg = _compose(["arch=rnn"])
    assert cfg.model.pos.name == "none"
    assert model_of(cfg, vocab_size=10).arch == "rnn"


@pytest.mark.parametrize(
    "experiment", sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))
)
def test_every_experiment_composes_to_a_valid_model(experiment: str) -> None:
    cfg = _compose([f"experiment={experiment}"])
    model = model_of(cfg, vocab_size=100)
    assert model.arch in {"decoder", "encoder", "encoder_decoder", "rnn"}
    assert model.arch in objective_facts(cfg.objective._target_).archs
