"""xfmr-export format=hf: every architecture xfmr trains leaves as the Hugging Face class that
represents it exactly, or is refused before anything is written; and comes back by
init_from=hf:DIR. Each tiny run is trained once (2 steps, in-process) and shared; nothing is
downloaded. Run with `-s` to see the measured differences."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from helpers.runs import CORPUS

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from xfmr.errors import UserError  # noqa: E402
from xfmr.generation.config import GenerationConfig  # noqa: E402
from xfmr.generation.search import generate  # noqa: E402
from xfmr.runs.export_hf import export_hf  # noqa: E402
from xfmr.runs.loading import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = 1e-4
# Accents, digits, runs of spaces, a tab, newlines and special tokens.
PARAGRAPH = "Café naïve 42 the fox,   3 owls\tat 10:30.\n\n the [MASK] moon [SEP] </s> <s> cat."
WORDPIECE = ["tokenizer=wordpiece", "tokenizer.vocab_size=120"]
BERT = ["arch=encoder", "size=tiny", *WORDPIECE]
T5 = [
    "arch=encoder_decoder",
    "size=tiny",
    "pos=relative",
    "model.pos.num_buckets=8",
    "model.pos.max_distance=16",
    "model.norm=rmsnorm",
    "model.placement=pre",
    "model.bias=false",
    "model.attn_scale=false",
]
CONLL = "".join(
    f"{w} NN {t}\n" + ("\n" if i % 4 == 3 else "")
    for i, (w, t) in enumerate(
        [("anna", "B-PER"), ("sees", "O"), ("paris", "B-LOC"), ("today", "O")] * 12
    )
)
SQUAD_CONTEXT = "the fox lives in the forest near the river."


def _data(root: Path) -> dict[str, str]:
    (root / "labels.tsv").write_text(
        "sentence\tlabel\n" + "the fox runs\tpos\nthe owl sleeps\tneg\n" * 12
    )
    (root / "tags.txt").write_text(CONLL)
    qas = [
        {
            "id": f"q{i}",
            "question": "where does the fox live?",
            "answers": [{"text": "the forest", "answer_start": SQUAD_CONTEXT.find("the forest")}],
        }
        for i in range(8)
    ]
    squad = {"data": [{"title": "t", "paragraphs": [{"context": SQUAD_CONTEXT, "qas": qas}]}]}
    (root / "squad.json").write_text(json.dumps(squad))
    lines = CORPUS.splitlines()
    (root / "docs.txt").write_text(
        "\n\n".join("\n".join(lines[i : i + 3]) for i in range(0, 60, 3))
    )
    return {
        k: str(root / f)
        for k, f in [
            ("labels", "labels.tsv"),
            ("tags", "tags.txt"),
            ("squad", "squad.json"),
            ("docs", "docs.txt"),
        ]
    }


def _runs(data: dict[str, str]) -> dict[str, list[str]]:
    return {
        "gpt2": ["size=tiny", "model.activation=gelu_tanh"],
        "llama": [
            "size=tiny",
            "pos=rotary",
            "model.norm=rmsnorm",
            "model.activation=swiglu",
            "model.bias=false",
            "model.tie_embeddings=false",
        ],
        "mlm_nsp": [
            *BERT,
            "objective=mlm_nsp",
            "data=documents",
            f"data.path={data['docs']}",
            "objective.max_length=32",
        ],
        "mlm": [*BERT, "objective=mlm"],
        "classification": [
            *BERT,
            "objective=classification",
            "data=delimited",
            f"data.train_path={data['labels']}",
            f"data.val_path={data['labels']}",
        ],
        "tagging": [
            *BERT,
            "objective=tagging",
            "data=conll",
            f"data.train_path={data['tags']}",
            f"data.val_path={data['tags']}",
        ],
        "qa": [
            *BERT,
            "objective=qa",
            "data=squad",
            f"data.train_path={data['squad']}",
            f"data.val_path={data['squad']}",
            "data.max_length=32",
            "data.max_query_length=12",
            "data.doc_stride=8",
        ],
        "t5_v1": [
            *T5,
            "objective=span_corruption",
            "objective.n_sentinels=4",
            "tokenizer=unigram",
            "tokenizer.vocab_size=80",
            "model.activation=relu",
            "model.scale_logits=true",
        ],
        "t5_v1.1": [
            *T5,
            "objective=seq2seq",
            "data=synthetic_translation",
            "data.n_pairs=200",
            "tokenizer=bpe",
            "tokenizer.vocab_size=80",
            "model.activation=geglu_tanh",
            "model.tie_embeddings=false",
            "model.scale_logits=false",
        ],
    }


HF_CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mlm_nsp": "BertForPreTraining",
    "mlm": "BertForMaskedLM",
    "classification": "BertForSequenceClassification",
    "tagging": "BertForTokenClassification",
    "qa": "BertForQuestionAnswering",
    "t5_v1": "T5ForConditionalGeneration",
    "t5_v1.1": "T5ForConditionalGeneration",
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (xfmr LoadedRun, HF folder): each tiny run trained and exported once, on use."""
    from xfmr.training.run import run_training

    data = _data(tmp_path_factory.mktemp("data"))
    done: dict[str, tuple] = {}

    def get(name: str):
        if name not in done:
            root = tmp_path_factory.mktemp(name)
            run_training(
                compose_config(root, [*_runs(data)[name], "trainer.enable_model_summary=false"])
            )
            result = export_hf(root / "run", root / "hf")
            assert result["hf_class"] == HF_CLASSES[name]
            done[name] = (load_run(root / "run"), root / "hf")
        return done[name]

    return get


def _padded(rows: list[list[int]], pad: int, side: str = "right") -> tuple[torch.Tensor, ...]:
    T = max(map(len, rows))
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, row in enumerate(rows):
        cols = slice(0, len(row)) if side == "right" else slice(T - len(row), T)
        ids[i, cols], mask[i, cols] = torch.tensor(row), 1
    return ids, mask


def _diff(ours: torch.Tensor, theirs: torch.Tensor, keep: torch.Tensor) -> float:
    return (ours - theirs).abs()[keep.bool()].max().item()


def _rows(run) -> list[list[int]]:
    tok = run.tokenizer
    return [
        tok.encode("the quick brown fox jumps"),
        tok.encode("a cat"),
        tok.encode("two owls at night"),
    ]


def _hf_tokenizer(folder: Path):
    return transformers.AutoTokenizer.from_pretrained(folder)


def _check_tokenizer(run, folder: Path, added: tuple[list[str], list[str]] = ([], [])) -> None:
    """AutoTokenizer gives the run's ids on PARAGRAPH, with the objective's specials around."""
    tokenizer = _hf_tokenizer(folder)
    ours = run.tokenizer.encode(PARAGRAPH)
    assert tokenizer(PARAGRAPH, add_special_tokens=False).input_ids == ours
    before = [run.tokenizer.token_to_id(t) for t in added[0]]
    after = [run.tokenizer.token_to_id(t) for t in added[1]]
    assert tokenizer(PARAGRAPH).input_ids == [*before, *ours, *after]


# --- decoders --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@torch.no_grad()
def test_decoder_logits_generation_and_pipeline(exported, name: str) -> None:
    run, folder = exported(name)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(hf_model).__name__ == HF_CLASSES[name]
    pad = 0
    for side in ("right", "left"):
        ids, mask = _padded(_rows(run), pad, side)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        ours = run.model(ids, mask, positions=positions)
        diff = _diff(ours, hf_model(ids, attention_mask=mask, position_ids=positions).logits, mask)
        print(f"\n[export] {name} ({side} padding): max |xfmr - HF| = {diff:.2e}")
        assert diff < TOLERANCE
    prompt = torch.tensor([run.tokenizer.encode("the quick")])
    config = GenerationConfig(strategy="greedy", max_new_tokens=8)
    ours = generate(run.model, prompt, config=config, eos_id=None, pad_id=pad)[0][0].tokens
    theirs = hf_model.generate(prompt, max_new_tokens=8, min_new_tokens=8)[0, prompt.size(1) :]
    assert theirs.tolist() == ours
    piped = transformers.pipeline("text-generation", model=str(folder))(
        "the quick", max_new_tokens=8
    )
    assert piped[0]["generated_text"] == run.tokenizer.decode(prompt[0].tolist() + ours)
    _check_tokenizer(run, folder)


# --- BERT ------------------------------------------------------------------------------------


def _bert_rows(run, layout: bool) -> list[list[int]]:
    """Raw text (MLM) or [CLS] text [SEP] (the task objectives)."""
    tok = run.tokenizer
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    rows = [tok.encode("the quick brown fox [MASK] over"), tok.encode("a [MASK] cat")]
    return [[cls, *r, sep] for r in rows] if layout else rows


@pytest.mark.parametrize("name", ["mlm_nsp", "mlm", "classification", "tagging", "qa"])
@torch.no_grad()
def test_bert_logits_match_with_padding(exported, name: str) -> None:
    run, folder = exported(name)
    auto = transformers.AutoModelForPreTraining if name == "mlm_nsp" else transformers.AutoModel
    hf_model = getattr(transformers, HF_CLASSES[name]).from_pretrained(folder).eval()
    assert auto is not None and type(hf_model).__name__ == HF_CLASSES[name]
    ids, mask = _padded(_bert_rows(run, layout=name not in ("mlm", "mlm_nsp")), 0)
    theirs = hf_model(ids, attention_mask=mask)
    ours = run.model(ids, mask)
    if name == "mlm_nsp":
        pairs = [
            (ours[0], theirs.prediction_logits, mask),
            (ours[1], theirs.seq_relationship_logits, None),
        ]
    elif name == "qa":
        pairs = [(ours, torch.stack([theirs.start_logits, theirs.end_logits], -1), mask)]
    elif name == "classification":
        pairs = [(ours, theirs.logits, None)]
    else:
        pairs = [(ours, theirs.logits, mask)]
    for a, b, keep in pairs:
        diff = _diff(a, b, torch.ones(a.shape[:2]) if keep is None else keep)
        print(f"\n[export] {name}: max |xfmr - HF| = {diff:.2e}")
        assert diff < TOLERANCE
    if name in ("classification", "tagging"):
        assert hf_model.config.id2label == dict(
            enumerate(json.loads((run.files.run_dir / "labels.json").read_text()))
        )


@torch.no_grad()
def test_fill_mask_pipeline_agrees(exported) -> None:
    run, folder = exported("mlm")
    text = "the quick brown fox [MASK] over"
    ids = torch.tensor([run.tokenizer.encode(text)])
    logits = run.model(ids)[0]  # (T, V)
    at = ids[0].tolist().index(run.tokenizer.token_to_id("[MASK]"))
    best = logits[at].argmax().item()
    piped = transformers.pipeline("fill-mask", model=str(folder))(text, top_k=1)
    assert piped[0]["token"] == best
    _check_tokenizer(run, folder)


@torch.no_grad()
def test_classification_pipeline_agrees(exported) -> None:
    run, folder = exported("classification")
    ids = torch.tensor([run.objective.encode(run.tokenizer.encode("the fox runs"))])
    label = run.objective.label_names[run.model(ids).argmax(-1).item()]
    piped = transformers.pipeline("text-classification", model=str(folder))("the fox runs")
    assert piped[0]["label"] == label
    _check_tokenizer(run, folder, (["[CLS]"], ["[SEP]"]))


@torch.no_grad()
def test_token_classification_pipeline_agrees(exported) -> None:
    run, folder = exported("tagging")
    text = "anna sees paris today"
    pieces = run.tokenizer.encode(text)
    cls, sep = run.tokenizer.token_to_id("[CLS]"), run.tokenizer.token_to_id("[SEP]")
    logits = run.model(torch.tensor([[cls, *pieces, sep]]))[0, 1:-1]  # (T, n_labels)
    labels = json.loads((run.files.run_dir / "labels.json").read_text())
    ours = [labels[i] for i in logits.argmax(-1).tolist()]
    piped = transformers.pipeline("token-classification", model=str(folder))(text)
    theirs = ["O"] * len(pieces)
    for entity in piped:  # the pipeline leaves out tokens tagged O
        theirs[entity["index"] - 1] = entity["entity"]
    assert theirs == ours


@torch.no_grad()
def test_question_answering_agrees(exported) -> None:
    """transformers 5 has no question-answering pipeline (REMOVED_TASKS): the tokenizer's pair
    encoding is xfmr's [CLS] question [SEP] context [SEP] with segments 0 / 1, and the span
    the HF model scores best is xfmr's."""
    run, folder = exported("qa")
    tok = run.tokenizer
    question, context = "where does the fox live?", SQUAD_CONTEXT
    q, c = tok.encode(question), tok.encode(context)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    ids = torch.tensor([[cls, *q, sep, *c, sep]])
    segments = torch.tensor([[0] * (len(q) + 2) + [1] * (len(c) + 1)])
    encoded = _hf_tokenizer(folder)(question, context, return_tensors="pt")
    assert torch.equal(encoded["input_ids"], ids)
    assert torch.equal(encoded["token_type_ids"], segments)
    hf_model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    theirs = hf_model(**encoded)
    ours = run.model(ids, torch.ones_like(ids), segments)[0]  # (T, 2)
    assert ours[:, 0].argmax() == theirs.start_logits[0].argmax()
    assert ours[:, 1].argmax() == theirs.end_logits[0].argmax()
    _check_tokenizer(run, folder, (["[CLS]"], ["[SEP]"]))


# --- T5 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t5_v1", "t5_v1.1"])
@torch.no_grad()
def test_t5_logits_generation_and_pipeline(exported, name: str) -> None:
    run, folder = exported(name)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    task = run.objective.text_task(run.tokenizer)
    sources = [[*r, task.eos_id] for r in _rows(run)]
    ids, mask = _padded(sources, task.pad_id)
    targets = [[task.decoder_start_id, *r] for r in _rows(run)[::-1]]
    decoder_ids, decoder_mask = _padded(targets, task.pad_id)
    ours = run.model(ids, mask, decoder_ids, decoder_mask)
    theirs = hf_model(
        input_ids=ids,
        attention_mask=mask,
        decoder_input_ids=decoder_ids,
        decoder_attention_mask=decoder_mask,
    ).logits
    diff = _diff(ours, theirs, decoder_mask)
    print(f"\n[export] {name}: max |xfmr - HF| = {diff:.2e}")
    assert diff < TOLERANCE
    config = GenerationConfig(strategy="greedy", max_new_tokens=8)
    ours = generate(
        run.model,
        ids,
        mask,
        config=config,
        eos_id=task.eos_id,
        pad_id=task.pad_id,
        decoder_start_id=task.decoder_start_id,
    )
    theirs = hf_model.generate(ids, attention_mask=mask, max_new_tokens=8)
    for row, hypotheses in zip(theirs.tolist(), ours, strict=True):
        row = [t for t in row[1:] if t != task.pad_id]  # no decoder start, no padding
        tokens = hypotheses[0].tokens
        assert row == (tokens + [task.eos_id] if hypotheses[0].finished else tokens)
    # transformers 5 has no text2text-generation pipeline (REMOVED_TASKS): its steps by hand.
    text = "the quick brown fox"
    tokenizer = _hf_tokenizer(folder)
    theirs = hf_model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=8)
    first = generate(
        run.model,
        torch.tensor([run.tokenizer.encode(text) + [task.eos_id]]),
        config=config,
        eos_id=task.eos_id,
        pad_id=task.pad_id,
        decoder_start_id=task.decoder_start_id,
    )
    expected = run.tokenizer.tokenizer.decode(first[0][0].tokens, skip_special_tokens=True)
    assert tokenizer.decode(theirs[0], skip_special_tokens=True) == expected
    _check_tokenizer(run, folder, ([], ["</s>"]))


# --- the way back ----------------------------------------------------------------------------


def _init_from(exported, tmp_path: Path, source: str, target: str) -> tuple[dict, object]:
    """Train `target`'s run for one step at lr 0 from `source`'s export: its weights are the
    export's. Returns results.json's init_from report and the new run."""
    from xfmr.training.run import run_training

    _, folder = exported(source)
    data = _data(tmp_path)
    overrides = [o for o in _runs(data)[target] if not o.startswith(("tokenizer", "size"))]
    cfg = compose_config(
        tmp_path,
        [
            *overrides,
            f"init_from=hf:{folder}",
            "optim.lr=0.0",
            "schedule=constant",
            "trainer.max_steps=1",
            "trainer.enable_model_summary=false",
        ],
    )
    results = run_training(cfg)
    return results["init_from"], load_run(tmp_path / "run")


@pytest.mark.parametrize("name", ["gpt2", "llama", "mlm_nsp", "t5_v1.1"])
@torch.no_grad()
def test_init_from_an_export_starts_from_the_run(exported, tmp_path: Path, name: str) -> None:
    run, _ = exported(name)
    report, started = _init_from(exported, tmp_path, name, name)
    assert report["new"] == [] and report["skipped"] == []
    ids, mask = _padded(_rows(run), 0)
    if name.startswith("t5"):
        ours, theirs = run.model(ids, mask, ids, mask), started.model(ids, mask, ids, mask)
    else:
        ours, theirs = run.model(ids, mask), started.model(ids, mask)
        ours, theirs = (ours[0], theirs[0]) if name == "mlm_nsp" else (ours, theirs)
    assert _diff(ours, theirs, mask) < TOLERANCE


HEADS = {
    "mlm": [],  # BertForMaskedLM's head is BertForPreTraining's MLM half: nothing new
    "classification": ["classifier.proj.bias", "classifier.proj.weight"],
    "tagging": ["classifier.bias", "classifier.weight"],
    "qa": ["span_head.bias", "span_head.weight"],
}


@pytest.mark.parametrize("objective", sorted(HEADS))
@torch.no_grad()
def test_a_bert_checkpoint_starts_every_bert_objective(exported, tmp_path, objective) -> None:
    """BertForPreTraining into each fine-tuning objective: the encoder is the checkpoint's,
    the task head is new and named in the report, the pre-training heads it has no place for
    are skipped."""
    pretrained, _ = exported("mlm_nsp")
    report, started = _init_from(exported, tmp_path, "mlm_nsp", objective)
    assert report["new"] == HEADS[objective]
    assert "cls.seq_relationship.weight" in report["skipped"]
    for name, tensor in pretrained.model.backbone.state_dict().items():
        assert torch.equal(started.model.backbone.state_dict()[name], tensor), name


# --- refusals --------------------------------------------------------------------------------


def test_an_rnn_run_is_refused_and_nothing_written(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    run_training(
        compose_config(tmp_path, ["arch=rnn", "size=tiny", "trainer.enable_model_summary=false"])
    )
    with pytest.raises(
        UserError,
        match=r"arch=rnn .* transformers has no recurrent .* nearest that exports: arch=decoder pos=learned",
    ):
        export_hf(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf")]


@pytest.mark.parametrize(
    ("arch", "settings", "message"),
    [
        (
            "decoder",
            dict(pos={"name": "alibi"}),
            r"GPT2LMHeadModel differs in pos.name='alibi'.*nearest that exports: pos=learned \(GPT2LMHeadModel\)",
        ),
        (
            "decoder",
            dict(pos={"name": "rotary"}, norm="rmsnorm", activation="gelu"),
            r"LlamaForCausalLM differs in activation='gelu'.*nearest that exports: model.activation=swiglu\|geglu\|geglu_tanh",
        ),
        (
            "encoder_decoder",
            dict(pos={"name": "sinusoidal"}, placement="post", activation="relu", embed_scale=True),
            r"T5ForConditionalGeneration differs in pos.name='sinusoidal'.*MarianMTModel lays its sinusoids out as \[sin \| cos\] halves",
        ),
        (
            "encoder_decoder",
            dict(
                pos={"name": "relative"},
                norm="rmsnorm",
                bias=False,
                attn_scale=False,
                tie_embeddings=True,
                scale_logits=False,
            ),
            r"differs in scale_logits=False; nearest that exports: model.scale_logits=true",
        ),
        (
            "encoder",
            dict(placement="pre"),
            r"nearest that exports: model.placement=post model.embed_norm=true",
        ),
    ],
)
def test_combinations_without_an_exact_class_are_refused(arch, settings, message) -> None:
    from xfmr.interop.hf_export import hf_family
    from xfmr.nn.config import ModelConfig
    from xfmr.nn.heads import EncoderPretraining
    from xfmr.nn.models import build_model

    config = ModelConfig.from_dict(
        {"vocab_size": 40, "d_model": 16, "n_heads": 2, "arch": arch, **settings}
    )
    model = EncoderPretraining(config) if arch == "encoder" else build_model(config)
    with pytest.raises(ValueError, match=message):
        hf_family(model)


def test_a_killed_export_leaves_no_folder(exported, tmp_path: Path, monkeypatch) -> None:
    """The folder is filled beside `out` and renamed at the end: an export that dies while
    writing the tokenizer leaves neither `out` nor its temporary folder."""
    run, _ = exported("gpt2")

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        export_hf(run.files.run_dir, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_taken_folder_and_a_bad_format(
    exported, tmp_path: Path, capsys, monkeypatch
) -> None:
    import sys

    from xfmr.cli.export import main

    run, folder = exported("gpt2")
    for args, message in [
        ([f"out={folder}"], "already exists and is not an empty folder"),
        (["format=onnx"], "format='onnx' is not one of ['safetensors', 'hf']"),
    ]:
        monkeypatch.setattr(
            sys, "argv", ["xfmr-export", f"run_dir={run.files.run_dir}", "format=hf", *args]
        )
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code != 0
        assert message in capsys.readouterr().err


# --- docs/huggingface.md -----------------------------------------------------------------------


def test_the_pages_commands_export_and_its_python_loads(exported, tmp_path: Path) -> None:
    """docs/huggingface.md's GPT-2 command, run by the real CLI, writes the folder its five lines
    of Python load with transformers alone; it shows one command per family."""
    import contextlib
    import io
    import re
    import shlex

    from helpers.cli import run_cli
    from helpers.docs import block

    commands = re.findall(r"^(xfmr-export [^#\n]*?)\s*(?:#.*)?$", block("hf-export-commands"), re.M)
    python = block("hf-load-python")
    section = "\n".join(commands)
    assert all(f"run_dir={k}_RUN" in section for k in ("GPT", "LLAMA", "BERT", "T5")), commands
    assert len(python.strip().splitlines()) <= 6  # an import line, a blank, then the lines
    run, _ = exported("gpt2")
    args = shlex.split(commands[0].replace("GPT_RUN", str(run.files.run_dir)))[1:]
    result = run_cli(args, tmp_path, module="xfmr.cli.export")
    assert result.returncode == 0, result.output
    assert "as GPT2LMHeadModel" in result.stdout
    printed = io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(printed):
        exec(compile(python, "docs/huggingface.md", "exec"), {})
    assert printed.getvalue().startswith("the quick"), printed.getvalue()
