"""`init_from=RUN_DIR`: a run starts from an earlier run's weights (pretrain -> fine-tune)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from helpers.runs import TinyRun
from xfmr.errors import UserError


def _weights(run_dir: Path, checkpoint: str = "last.ckpt") -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / checkpoint, weights_only=True)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}


def test_finetune_starts_from_the_pretrained_weights_and_reports_them(
    tmp_path: Path, tiny_run: TinyRun
) -> None:
    from xfmr.training.run import run_training

    pretrained = tiny_run.dir
    out = tmp_path / "finetune"
    out.mkdir()
    cfg = compose_config(
        out, ["size=tiny", f"init_from={pretrained}", "optim.lr=0.0", "schedule=constant"]
    )
    results = run_training(cfg)
    before, after = _weights(pretrained), _weights(out / "run")
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), (
        "lr 0: weights are the loaded ones"
    )
    assert results["init_from"]["loaded"] == len(before)
    assert results["init_from"]["skipped"] == [] and results["init_from"]["new"] == []
    assert (out / "run" / "tokenizer.json").read_text() == (
        pretrained / "tokenizer.json"
    ).read_text()


def test_frozen_backbone_stays_put_while_a_lower_lr_still_moves_it(
    tmp_path: Path, tiny_run: TinyRun
) -> None:
    from xfmr.training.run import run_training

    pretrained = tiny_run.dir
    out = tmp_path / "frozen"
    out.mkdir()
    frozen = ["size=tiny", f"init_from={pretrained}", "finetune.freeze_backbone=true"]
    with pytest.raises(UserError, match="leaves nothing to train"):
        run_training(compose_config(out, frozen))  # the LM head is tied to the frozen embedding
    results = run_training(compose_config(out, [*frozen, "model.tie_embeddings=false"]))
    assert results["init_from"]["new"] == [], "the untied head takes the saved lm_head weight"
    before, after = _weights(pretrained), _weights(out / "run")
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("backbone."))

    out = tmp_path / "scaled"
    out.mkdir()
    run_training(
        compose_config(
            out, ["size=tiny", f"init_from={pretrained}", "finetune.backbone_lr_scale=0.1"]
        )
    )
    after = _weights(out / "run")
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("backbone."))


def test_nothing_in_common_is_refused(tmp_path: Path, tiny_run: TinyRun) -> None:
    from xfmr.nn import ModelConfig, build_model
    from xfmr.parts.sources import init_source
    from xfmr.parts.transfer import initialise_from
    from xfmr.training.run import run_training

    pretrained = tiny_run.dir
    out = tmp_path / "rnn"
    out.mkdir()
    # Refused by the config, which names what differs, before anything is built ...
    with pytest.raises(UserError, match=r"was trained as another model \(model.arch: trained"):
        run_training(compose_config(out, ["arch=rnn", "size=small", f"init_from={pretrained}"]))
    # ... and by the run, which finds no tensor to take, where the config could not tell.
    rnn = build_model(
        ModelConfig.from_dict({"arch": "rnn", "vocab_size": 30, "pos": {"name": "none"}})
    )
    with pytest.raises(UserError, match="no tensor matches"):
        initialise_from(rnn, init_source(str(pretrained)))


def test_bert_style_mlm_pretraining_then_classification_carries_the_backbone(
    tmp_path: Path,
) -> None:
    """BERT's two steps: MLM pretraining, then a new classification head on the same encoder."""
    from xfmr.training.run import run_training

    encoder = ["arch=encoder", "size=tiny", "tokenizer=wordpiece", "tokenizer.vocab_size=120"]
    pre = tmp_path / "mlm"
    pre.mkdir()
    run_training(compose_config(pre, [*encoder, "objective=mlm", "trainer.max_steps=4"]))

    tsv = tmp_path / "labelled.tsv"
    tsv.write_text("sentence\tlabel\n" + "the quick brown fox\tpos\nthe lazy dog\tneg\n" * 4)
    fine = tmp_path / "cls"
    fine.mkdir()
    data = ["data=delimited", f"data.train_path={tsv}", f"data.val_path={tsv}"]
    results = run_training(
        compose_config(
            fine,
            [
                *encoder,
                "objective=classification",
                *data,
                f"init_from={pre / 'run'}",
                "optim.lr=0.0",
                "schedule=constant",
            ],
        )
    )
    before, after = _weights(pre / "run", "best.ckpt"), _weights(fine / "run")  # init_from: best
    backbone = [k for k in before if k.startswith("backbone.")]
    assert backbone and all(torch.equal(before[k], after[k]) for k in backbone)
    assert results["init_from"]["loaded"] == len(backbone)
    assert sorted(results["init_from"]["new"]) == [
        "classifier.proj.bias",
        "classifier.proj.weight",
        "pooler.dense.bias",
        "pooler.dense.weight",
    ]
    assert sorted(results["init_from"]["skipped"]) == sorted(
        k for k in before if k.startswith("mlm.")
    ), "BERT's MLM head has no place here"
    assert "val/acc" in results["metrics"]


def test_source_tokenizer_without_the_objectives_tokens_is_refused(
    tmp_path: Path, tiny_run: TinyRun
) -> None:
    from xfmr.training.run import run_training

    pretrained = tiny_run.dir  # char tokenizer: no [CLS] or [SEP]
    tsv = tmp_path / "labelled.tsv"
    tsv.write_text("sentence\tlabel\nthe quick fox\tpos\nthe dog\tneg\n")
    out = tmp_path / "cls"
    out.mkdir()
    data = ["data=delimited", f"data.train_path={tsv}", f"data.val_path={tsv}"]
    with pytest.raises(UserError, match=r"lacks \['\[PAD\]', '\[CLS\]', '\[SEP\]'\]"):
        run_training(
            compose_config(
                out,
                [
                    "size=tiny",
                    "objective=classification",
                    "arch=decoder",
                    "objective.pooling=last",
                    *data,
                    f"init_from={pretrained}",
                ],
            )
        )
