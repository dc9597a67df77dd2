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

from conftest import CORPUS, compose_config

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
    "arch=encoder_decoder", "size=tiny", "pos=relative", "pos.num_buckets=8", "pos.max_distance=16",
    "model.norm=rmsnorm", "model.placement=pre", "model.bias=false", "model.attn_scale=false",
]  # fmt: skip
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
    qas = [{"id": f"q{i}", "question": "where does the fox live?",
            "answers": [{"text": "the forest", "answer_start": SQUAD_CONTEXT.find("the forest")}]}
           for i in range(8)]  # fmt: skip
    squad = {"data": [{"title": "t", "paragraphs": [{"context": SQUAD_CONTEXT, "qas": qas}]}]}
    (root / "squad.json").write_text(json.dumps(squad))
    lines = CORPUS.splitlines()
    (root / "docs.txt").write_text("\n\n".join("\n".join(lines[i : i + 3]) for i in range(0, 60, 3)))
    return {k: str(root / f) for k, f in
            [("labels", "labels.tsv"), ("tags", "tags.txt"), ("squad", "squad.json"), ("docs", "docs.txt")]}  # fmt: skip


def _runs(data: dict[str, str]) -> dict[str, list[str]]:
    return {
        "gpt2": ["size=tiny", "model.activation=gelu_tanh"],
        "llama": ["size=tiny", "pos=rotary", "model.norm=rmsnorm", "model.activation=swiglu",
                  "model.bias=false", "model.tie_embeddings=false"],  # fmt: skip
        "mlm_nsp": [*BERT, "objective=mlm_nsp", "data=documents", f"data.path={data['docs']}",
                    "objective.max_length=32"],  # fmt: skip
        "mlm": [*BERT, "objective=mlm"],
        "classification": [*BERT, "objective=classification", "data=delimited",
                           f"data.train_path={data['labels']}", f"data.val_path={data['labels']}"],  # fmt: skip
        "tagging": [*BERT, "objective=tagging", "data=conll", f"data.train_path={data['tags']}",
                    f"data.val_path={data['tags']}"],  # fmt: skip
        "qa": [*BERT, "objective=qa", "data=squad", f"data.train_path={data['squad']}",
               f"data.val_path={data['squad']}", "data.max_length=32", "data.max_query_length=12", "data.doc_stride=8"],  # fmt: skip
        "t5_v1": [*T5, "objective=span_corruption", "objective.n_sentinels=4", "tokenizer=unigram",
                  "tokenizer.vocab_size=80", "model.activation=relu", "model.scale_logits=true"],  # fmt: skip
        "t5_v1.1": [*T5, "objective=seq2seq", "data=synthetic_translation", "data.n_pairs=200",
                    "tokenizer=bpe", "tokenizer.vocab_size=80", "model.activation=geglu_tanh",
                    "model.tie_embeddings=false", "model.scale_logits=false"],  # fmt: skip
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
    from xfmr.training.run import train

    data = _data(tmp_path_factory.mktemp("data"))
    done: dict[str, tuple] = {}

    def get(name: str):
        if name not in done:
            root = tmp_path_factory.mktemp(name)
            train(compose_config(root, [*_runs(data)[name], "trainer.enable_model_summary=false"]))
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
    return [tok.encode("the quick brown fox jumps"), tok.encode("a cat"), tok.encode("two owls at night")]


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
    piped = transformers.pipeline("text-generation", model=str(folder))("the quick", max_new_tokens=8)
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
        pairs = [(ours[0], theirs.prediction_logits, mask), (ours[1], theirs.seq_relationship_logits, None)]
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
        assert hf_model.config.id2label == dict(enumerate(json.loads((run.files.run_dir / "labels.json").read_text())))


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
        input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
        decoder_attention_mask=decoder_mask,
    ).logits  # fmt: skip
    diff = _diff(ours, theirs, decoder_mask)
    print(f"\n[export] {name}: max |xfmr - HF| = {diff:.2e}")
    assert diff < TOLERANCE
    config = GenerationConfig(strategy="greedy", max_new_tokens=8)
    ours = generate(
        run.model, ids, mask, config=config, eos_id=task.eos_id, pad_id=task.pad_id,
        decoder_start_id=task.decoder_start_id,
    )  # fmt: skip
    theirs = hf_model.generate(ids, attention_mask=mask, max_new_tokens=8)
    for row, hypotheses in zip(theirs.tolist(), ours, strict=True):
        row = [t for t in row[1:] if t != task.pad_id]  # no decoder start, no padding
        tokens = hypotheses[0].tokens
        assert row == (tokens + [task.eos_id] if hypotheses[0].finished else tokens)
    # transformers 5 has no text2text-generation pipeline (REMOVED_TASKS): its steps by hand.
    text = "the quick brown fox"
    tokenizer = _hf_tokenizer(folder)
    theirs = hf_model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=8)
    first = generate(run.model, torch.tensor([run.tokenizer.encode(text) + [task.eos_id]]), config=config,
                     eos_id=task.eos_id, pad_id=task.pad_id, decoder_start_id=task.decoder_start_id)  # fmt: skip
    expected = run.tokenizer.tokenizer.decode(first[0][0].tokens, skip_special_tokens=True)
    assert tokenizer.decode(theirs[0], skip_special_tokens=True) == expected
    _check_tokenizer(run, folder, ([], ["</s>"]))
