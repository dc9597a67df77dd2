"""objective.loss_chunk: a decoder's head and loss a chunk of tokens at a time
(`xfmr.objectives.chunked_loss`), for clm and seq2seq, give the loss and every gradient of the
plain path, whatever the head does (soft-cap, µP's readout, T5's logit scale, an untied or
padded vocabulary, label smoothing, the z-loss) and however the chunks fall; validation keeps
its logits; and the settings it cannot serve are refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.config import compose_config
from xfmr.errors import UserError
from xfmr.nn import ModelConfig
from xfmr.objectives.chunked_loss import chunked_head_loss
from xfmr.objectives.clm import CausalLMObjective
from xfmr.objectives.common import IGNORE_INDEX
from xfmr.objectives.seq2seq import Seq2SeqObjective

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 50


def _gradients(objective, model, batch, *, autocast=False):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        terms, logits = objective.forward(model, batch)
    sum(terms.values()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return {k: v.detach() for k, v in terms.items()}, logits, grads


def _batch(rows: int = 3, length: int = 11):
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(VOCAB, (rows, length), generator=generator)
    labels[0, :4] = IGNORE_INDEX  # a row partly uncounted
    return {
        "input_ids": torch.randint(VOCAB, (rows, length), generator=generator),
        "labels": labels,
    }


@pytest.mark.parametrize(
    ("model_keys", "z_loss", "chunk"),
    [
        ({}, 0.0, 7),  # 33 tokens: four chunks of 7, one of 5
        ({}, 0.0, 1000),  # one chunk
        ({"logit_softcap": 3.0}, 0.1, 5),
        ({"tie_embeddings": False}, 0.1, 8),
        ({"parametrization": "mup", "mup_base_width": 8}, 0.0, 6),
        ({"vocab_multiple": 64}, 0.1, 6),  # padded rows take part in the softmax
    ],
)
def test_chunks_give_the_plain_paths_loss_and_gradients(model_keys, z_loss, chunk):
    config = ModelConfig(vocab_size=VOCAB, n_layers=2, n_heads=2, d_model=16, **model_keys)
    plain = CausalLMObjective(z_loss=z_loss)
    chunked = CausalLMObjective(z_loss=z_loss, loss_chunk=chunk)
    torch.manual_seed(0)
    model = plain.build_model(config)
    batch = _batch()
    want, logits, want_grads = _gradients(plain, model, batch)
    got, no_logits, got_grads = _gradients(chunked, model, batch)
    assert logits is not None and no_logits is None  # the chunked step holds no logits
    assert got.keys() == want.keys()
    for term in want:
        torch.testing.assert_close(got[term], want[term], rtol=1e-6, atol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():  # float32's rounding, in the sums' other order
        assert (got_grads[name] - grad).norm() <= 1e-5 * grad.norm() + 1e-9, name


@pytest.mark.parametrize(
    ("model_keys", "smoothing", "z_loss"),
    [
        ({}, 0.1, 0.0),  # the paper's label smoothing
        ({"scale_logits": True, "tie_embeddings": True, "logit_softcap": 5.0}, 0.2, 0.1),
        ({"vocab_multiple": 64}, 0.0, 0.1),
    ],
)
def test_an_encoder_decoders_chunks_give_its_loss_and_gradients(model_keys, smoothing, z_loss):
    """seq2seq: the decoder's head through the chunks, with label smoothing (1 - a) onehot + a / V
    as F.cross_entropy takes it, T5's logit scale, a tied or padded vocabulary and the z-loss."""
    keys = dict(vocab_size=VOCAB, n_layers=1, n_decoder_layers=2, n_heads=2, d_model=16)
    config = ModelConfig(arch="encoder_decoder", **{**keys, **model_keys})
    plain = Seq2SeqObjective(label_smoothing=smoothing, z_loss=z_loss)
    chunked = Seq2SeqObjective(label_smoothing=smoothing, z_loss=z_loss, loss_chunk=7)
    torch.manual_seed(0)
    model = plain.build_model(config)
    generator = torch.Generator().manual_seed(2)
    source = torch.randint(VOCAB, (3, 9), generator=generator)
    target = _batch(3, 8)
    batch = {
        "input_ids": source,
        "attention_mask": torch.ones_like(source),
        "decoder_input_ids": target["input_ids"],
        "decoder_attention_mask": (target["labels"] != IGNORE_INDEX).long(),
        "labels": target["labels"],
    }
    want, _, want_grads = _gradients(plain, model, batch)
    got, logits, got_grads = _gradients(chunked, model, batch)
    assert logits is None and got.keys() == want.keys()
    for term in want:
        torch.testing.assert_close(got[term], want[term], rtol=1e-6, atol=1e-5)
    for name, grad in want_grads.items():
        assert (got_grads[name] - grad).norm() <= 1e-5 * grad.norm() + 1e-9, name


def test_under_bf16_autocast_chunks_are_as_close_to_float32_as_the_plain_path():
    config = ModelConfig(vocab_size=VOCAB, n_layers=2, n_heads=2, d_model=32, logit_softcap=4.0)
    torch.manual_seed(0)
    model = CausalLMObjective().build_model(config)
    batch = _batch(4, 16)
    _, _, exact = _gradients(CausalLMObjective(z_loss=0.1), model, batch)
    errors = {}
    for chunk in (None, 9):
        objective = CausalLMObjective(z_loss=0.1, loss_chunk=chunk)
        _, _, grads = _gradients(objective, model, batch, autocast=True)
        errors[chunk] = max((grads[n] - g).norm() / g.norm() for n, g in exact.items())
    assert errors[None] < 0.05, errors  # bfloat16's own error
    assert errors[9] < 1.5 * errors[None], errors


def test_a_head_bias_and_hidden_states_get_their_gradients():
    """The function alone, on a biased head: the gradients of the hidden states, the weight and
    the bias are those of F.linear then F.cross_entropy, for each output's own gradient."""
    torch.manual_seed(0)
    head = torch.nn.Linear(8, VOCAB)
    hidden = torch.randn(2, 5, 8, requires_grad=True)
    labels = torch.randint(VOCAB, (2, 5))
    labels[1, 0] = IGNORE_INDEX
    scale = torch.tensor([0.3, 2.0])  # d total / d ce, d total / d z
    ce, z = chunked_head_loss(hidden, head, labels, chunk=3, z_loss=True)
    (scale[0] * ce + scale[1] * z).backward()
    got = [t.grad.clone() for t in (hidden, head.weight, head.bias)]
    for t in (hidden, head.weight, head.bias):
        t.grad = None
    logits = F.linear(hidden, head.weight, head.bias).flatten(0, 1)
    flat = labels.flatten()
    want_ce = F.cross_entropy(logits, flat, ignore_index=IGNORE_INDEX, reduction="sum")
    want_z = torch.logsumexp(logits, -1).square()[flat != IGNORE_INDEX].sum()
    torch.testing.assert_close(ce, want_ce)
    torch.testing.assert_close(z, want_z)
    (scale[0] * want_ce + scale[1] * want_z).backward()
    for mine, t in zip(got, (hidden, head.weight, head.bias), strict=True):
        torch.testing.assert_close(mine, t.grad)


def test_without_gradients_the_logits_are_made_whole():
    """Validation and evaluation (no gradients recorded) score and return the logits."""
    config = ModelConfig(vocab_size=VOCAB, n_layers=1, n_heads=2, d_model=16)
    objective = CausalLMObjective(loss_chunk=4)
    model = objective.build_model(config)
    with torch.no_grad():
        terms, logits = objective.forward(model, _batch())
    assert logits.shape == (3, 11, VOCAB) and terms["tokens"] > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["objective.loss_chunk=0"], "objective.loss_chunk=0 is not valid: use an integer >= 1"),
        (["arch=rnn", "objective.loss_chunk=64"], "arch=rnn keeps its own head"),
        (
            ["trainer=fsdp", "trainer.accelerator=cpu", "objective.loss_chunk=64"],
            "with trainer=fsdp: the chunked head",
        ),
    ],
)
def test_settings_it_cannot_serve_are_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(UserError, match=message):
        compose_config(tmp_path, overrides)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_compiled_chunks_train_as_the_plain_path():
    """bf16 autocast on a GPU, both paths under torch.compile: the same loss and gradients
    to bfloat16's error (the CPU tests above hold float32 to its rounding)."""
    config = ModelConfig(vocab_size=VOCAB, n_layers=2, n_heads=2, d_model=64, logit_softcap=4.0)
    torch.manual_seed(0)
    model = CausalLMObjective().build_model(config).cuda()
    batch = {key: value.cuda() for key, value in _batch(4, 32).items()}
    results = {}
    for chunk in (None, 40):
        objective = CausalLMObjective(z_loss=1e-3, loss_chunk=chunk)
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            terms, _ = torch.compile(objective.forward)(model, batch)
        sum(terms.values()).backward()
        grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
        results[chunk] = (terms["tokens"].float(), grads)
    (plain, plain_grads), (chunked, chunked_grads) = results[None], results[40]
    torch.testing.assert_close(chunked, plain, rtol=1e-2, atol=1e-2)
    for name, grad in plain_grads.items():
        assert (chunked_grads[name] - grad).norm() <= 0.05 * grad.norm() + 1e-6, name
