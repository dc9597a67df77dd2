"""Decoding: beam search against exhaustive search and Hugging Face `generate`, greedy against HF,
and the properties the settings promise (n-best order, min_new_tokens, no repeated n-grams,
top-k/top-p support, seeds, batching, the cache switch), plus GenerationConfig's checks and
`record_attention`."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from helpers.models import randomize
from xfmr.generation import GenerationConfig, Hypothesis, generate, sample_text
from xfmr.generation.processors import length_penalty
from xfmr.interop.hf import from_hf
from xfmr.nn.attention import record_attention
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.masks import causal_mask
from xfmr.nn.models import CausalLM, build_model

VOCAB, PAD, START = 40, 0, 1
STD = 0.3  # of the random weights other than norm gains

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(arch: str = "decoder", pos: str = "rotary", vocab: int = VOCAB, **overrides):
    config = ModelConfig(
        vocab_size=vocab,
        arch=arch,
        n_layers=2,
        n_heads=4,
        d_model=32,
        pos=PosConfig(name=pos, max_positions=48),
        **overrides,
    )
    return randomize(build_model(config), std=STD)


def _prompts(lengths: list[int], *, seed: int = 0, side: str = "right") -> tuple[torch.Tensor, ...]:
    """Random ids (B, T) from 2 .. VOCAB-1 with random ids in the pads, and the mask."""
    T = max(lengths)
    ids = torch.randint(2, VOCAB, (len(lengths), T), generator=torch.Generator().manual_seed(seed))
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids, (mask if side == "right" else mask.flip(-1))


def _run(model, ids, mask=None, **settings) -> list[list[Hypothesis]]:
    eos = settings.pop("eos_id", None)
    return generate(
        model,
        ids,
        mask,
        config=GenerationConfig(**settings),
        eos_id=eos,
        pad_id=PAD,
        decoder_start_id=START,
    )


def _assert_same(ours: list[list[Hypothesis]], theirs: list[list[Hypothesis]]) -> None:
    assert [[h.tokens for h in row] for row in ours] == [[h.tokens for h in row] for row in theirs]
    assert [[h.finished for h in row] for row in ours] == [
        [h.finished for h in row] for row in theirs
    ]
    for row, other in zip(ours, theirs, strict=True):
        for h, g in zip(row, other, strict=True):
            assert h.score == pytest.approx(g.score, abs=1e-5)


# --- GenerationConfig ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_beams", 0),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("temperature", 0.0),
        ("temperature", -1.0),
        ("top_k", 0),
        ("strategy", "topk"),
        ("length_penalty_form", "wu"),
        ("max_new_tokens", 0),
        ("no_repeat_ngram_size", -1),
        ("use_cache", "yes"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"generation\.{field}={value!r}.*use "):
        GenerationConfig(**{field: value})


def test_config_rejects_n_best_beyond_the_beams_and_for_greedy() -> None:
    with pytest.raises(ValueError, match=r"generation\.n_best=6 .*num_beams=5"):
        GenerationConfig(strategy="beam", n_best=6)
    with pytest.raises(ValueError, match=r"generation\.min_new_tokens=9 .*max_new_tokens=8"):
        GenerationConfig(max_new_tokens=8, min_new_tokens=9)
    with pytest.raises(ValueError, match=r"generation\.n_best=2 .*greedy"):
        GenerationConfig(n_best=2)
    assert GenerationConfig(strategy="sample", n_best=8, top_p=1.0).n_best == 8


def test_config_loads_without_torch() -> None:
    code = (
        "import sys; from xfmr.generation import GenerationConfig; GenerationConfig(); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- beam search against exhaustive search ---------------------------------------------------


def _all_sequences(vocab: int, eos: int, length: int) -> list[tuple[list[int], bool]]:
    """Every hypothesis of at most `length` new tokens: ended by eos, or `length` long."""
    words = [t for t in range(vocab) if t != eos]
    found = []
    for n in range(length + 1):
        for body in itertools.product(words, repeat=n):
            if n < length:
                found.append(([*body, eos], True))
            else:
                found.append((list(body), False))
    for body in itertools.product(words, repeat=length - 1):
        found.append(([*body, eos], True))
    return found


@torch.no_grad()
def _exhaustive(model, prompt: list[int], *, eos: int, length: int, alpha: float, form: str):
    """Every hypothesis scored as beam search ranks them, best first: (tokens, score, finished)."""
    scored = []
    for tokens, finished in _all_sequences(model.config.vocab_size, eos, length):
        ids = torch.tensor([prompt + tokens])
        logprobs = model(ids)[0, len(prompt) - 1 : -1].log_softmax(-1)  # (n, V)
        total = logprobs.gather(1, torch.tensor(tokens)[:, None]).sum().item()
        score = total / length_penalty(len(tokens), alpha=alpha, form=form).item()
        scored.append((tokens[:-1] if finished else tokens, score, finished))
    return sorted(scored, key=lambda item: -item[1])


@pytest.mark.parametrize(
    ("alpha", "form"), [(0.0, "average"), (0.75, "average"), (1.5, "average"), (1.0, "gnmt")]
)
def test_beam_search_equals_exhaustive_search(alpha: float, form: str) -> None:
    """Vocabulary of 4 (eos = 3), up to 3 new tokens: 40 hypotheses. With 36 beams nothing is
    pruned, so beam search must return exactly the 5 best by length-penalised score, in order."""
    torch.manual_seed(0)
    model = _model(vocab=4, pos="learned")
    prompt, eos = [1, 2, 0], 3
    best = _exhaustive(model, prompt, eos=eos, length=3, alpha=alpha, form=form)[:5]
    found = _run(
        model,
        torch.tensor([prompt]),
        strategy="beam",
        num_beams=36,
        n_best=5,
        max_new_tokens=3,
        length_penalty=alpha,
        length_penalty_form=form,
        eos_id=eos,
    )[0]
    assert [(h.tokens, h.finished) for h in found] == [(t, f) for t, _, f in best]
    assert [h.score for h in found] == pytest.approx([s for _, s, _ in best], abs=1e-5)
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)


class _Bigram(CausalLM):
    """A hand-built scorer: the next token's log-probs depend on the last token only."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__(ModelConfig(vocab_size=table.size(0), n_layers=1, d_model=8, n_heads=1))
        self.register_buffer("table", table.log())

    def forward(self, input_ids, attention_mask=None, *, positions=None, cache=None):
        return self.table[input_ids]  # (B, T, V)


def test_beam_search_finds_what_greedy_misses() -> None:
    """A garden path: after the prompt token 0, token 1 (p=.6) leads to a flat distribution
    and token 2 (p=.4) to eos (p=.95). Greedy takes 1; beam search with 2 beams finds 2, eos."""
    eos = 3
    table = torch.tensor(
        [
            [0.0, 0.6, 0.4, 0.0],
            [0.0, 0.34, 0.33, 0.33],
            [0.0, 0.025, 0.025, 0.95],
            [0.25, 0.25, 0.25, 0.25],
        ]
    ).clamp(min=1e-9)
    model, prompt = _Bigram(table), torch.tensor([[0]])
    greedy = _run(model, prompt, max_new_tokens=4, eos_id=eos)[0][0]
    beam = _run(model, prompt, strategy="beam", num_beams=2, max_new_tokens=4, eos_id=eos)[0][0]
    assert greedy.tokens[0] == 1 and not greedy.finished
    assert beam.tokens == [2] and beam.finished
    assert beam.score == pytest.approx(math.log(0.4 * 0.95) / 2**0.75)  # L = 2 with eos


def test_without_early_stopping_the_best_hypothesis_is_no_worse() -> None:
    model, (ids, mask) = _model(), _prompts([5, 3, 6], seed=3)
    common = dict(strategy="beam", num_beams=3, max_new_tokens=10, eos_id=7, length_penalty=1.0)
    early = _run(model, ids, mask, early_stopping=True, **common)
    exact = _run(model, ids, mask, early_stopping=False, **common)
    for first, second in zip(early, exact, strict=True):
        assert second[0].score >= first[0].score - 1e-6


# --- Hugging Face parity ---------------------------------------------------------------------

HF_PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [20, 3, 30, 31, 4, 33, 2]]


@pytest.fixture
def transformers():
    """Hugging Face `transformers`, which only the parity tests need: without it they skip and
    every other test here still runs."""
    return pytest.importorskip("transformers")


def _hf_gpt2(transformers) -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=48, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    return randomize(transformers.GPT2LMHeadModel(config), std=STD)


def _hf_t5(transformers) -> nn.Module:
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        feed_forward_proj="relu", tie_word_embeddings=True, attn_implementation="eager",
    )  # fmt: skip
    return randomize(transformers.T5ForConditionalGeneration(config), std=STD)


@torch.no_grad()
def _hf_hypotheses(hf_model, prompt: list[int], *, eos: int, **settings) -> list[Hypothesis]:
    """HF `generate` on one unpadded row, as Hypotheses (prompt/start token and eos removed)."""
    ids = torch.tensor([prompt])
    out = hf_model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=PAD,
        return_dict_in_generate=True,
        output_scores=True,
        **settings,
    )
    skip = 1 if hf_model.config.is_encoder_decoder else len(prompt)
    scores = out.sequences_scores.tolist() if settings.get("num_beams", 1) > 1 else None
    found = []
    for k, sequence in enumerate(out.sequences[:, skip:].tolist()):
        finished = eos in sequence
        tokens = sequence[: sequence.index(eos)] if finished else sequence
        found.append(Hypothesis(tokens, scores[k] if scores else 0.0, finished))
    return found


def _padded_batch(prompts: list[list[int]], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(p) for p in prompts)
    ids, mask = torch.full((len(prompts), T), 17), torch.zeros(len(prompts), T, dtype=torch.long)
    for b, p in enumerate(prompts):
        columns = slice(0, len(p)) if side == "right" else slice(T - len(p), T)
        ids[b, columns], mask[b, columns] = torch.tensor(p), 1
    return ids, mask


@pytest.mark.parametrize("family", ["gpt2", "t5"])
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_matches_hugging_face_generate(family: str, strategy: str, transformers) -> None:
    """The same random weights in HF and xfmr (through xfmr.interop.hf). HF runs each prompt
    alone; xfmr runs them as one padded batch (right-padded: generate lays them out itself).
    HF's early_stopping=True is ours; its length_penalty is our "average" form's alpha.
    Beam: 4 beams, n_best 3, alpha 0.6, with eos so that some hypotheses finish."""
    hf_model = _hf_gpt2(transformers) if family == "gpt2" else _hf_t5(transformers)
    model = from_hf(hf_model)
    start = PAD if family == "t5" else None  # T5 starts the decoder with <pad>
    ids, mask = _padded_batch(HF_PROMPTS, "right")
    max_new = 8
    plain = generate(model, ids, mask, config=GenerationConfig(max_new_tokens=max_new),
                     eos_id=None, pad_id=PAD, decoder_start_id=start)  # fmt: skip
    eos = plain[0][0].tokens[4]  # one the model emits: some hypotheses end, others run on
    beam = dict(num_beams=4, length_penalty=0.6, early_stopping=True) if strategy == "beam" else {}
    hf_settings = dict(max_new_tokens=max_new, no_repeat_ngram_size=3, min_new_tokens=1, **beam)
    if family == "t5":
        hf_settings["decoder_start_token_id"] = start
    if strategy == "beam":
        hf_settings["num_return_sequences"] = 3
    theirs = [_hf_hypotheses(hf_model, p, eos=eos, **hf_settings) for p in HF_PROMPTS]
    ours = generate(
        model,
        ids,
        mask,
        config=GenerationConfig(
            strategy=strategy,
            max_new_tokens=max_new,
            min_new_tokens=1,
            no_repeat_ngram_size=3,
            n_best=3 if strategy == "beam" else 1,
            **beam,
        ),
        eos_id=eos,
        pad_id=PAD,
        decoder_start_id=start,
    )
    assert [[h.tokens for h in row] for row in ours] == [[h.tokens for h in row] for row in theirs]
    assert any(h.finished for row in ours for h in row) and not all(
        h.finished for row in ours for h in row
    )
    if strategy == "beam":
        for row, other in zip(ours, theirs, strict=True):
            assert [h.score for h in row] == pytest.approx([h.score for h in other], abs=1e-4)


# --- the settings' promises ------------------------------------------------------------------


def test_min_new_tokens_blocks_eos() -> None:
    """The model's first choice is eos (so greedy stops at once); min_new_tokens=3 keeps it out
    of the first three tokens, for greedy and beam alike."""
    model, (ids, _) = _model(), _prompts([4], seed=1)
    eos = _run(model, ids, max_new_tokens=1)[0][0].tokens[0]
    assert _run(model, ids, max_new_tokens=6, eos_id=eos)[0][0].tokens == []
    for strategy in ["greedy", "beam"]:
        for h in _run(model, ids, strategy=strategy, max_new_tokens=6, min_new_tokens=3,
                      n_best=1, eos_id=eos)[0]:  # fmt: skip
            assert len(h.tokens) >= 3 and eos not in h.tokens[:3]


def _ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_no_repeat_ngram_never_repeats(size: int, strategy: str) -> None:
    """A random model left alone repeats itself; with the ban, no n-gram appears twice in
    prompt + output."""
    model, (ids, mask) = _model(vocab=VOCAB), _prompts([3, 5], seed=2)
    settings = dict(strategy=strategy, max_new_tokens=16, seed=0, num_beams=3, n_best=1)
    plain = _run(model, ids, mask, **settings)
    banned = _run(model, ids, mask, no_repeat_ngram_size=size, **settings)
    assert any(
        len(set(_ngrams(h.tokens, 2))) < len(_ngrams(h.tokens, 2)) for row in plain for h in row
    )
    for b, row in enumerate(banned):
        prompt = ids[b][mask[b].bool()].tolist()
        for h in row:
            grams = _ngrams(prompt + h.tokens, size)
            assert len(grams) == len(set(grams)) and len(h.tokens) == 16


@torch.no_grad()
def _step_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Teacher-forced (n, V) log-probs for each generated token."""
    ids = torch.tensor([prompt + tokens])
    return model(ids)[0, len(prompt) - 1 : -1].log_softmax(-1)


def _top_k_set(logits: torch.Tensor, k: int = 3) -> torch.Tensor:
    return logits >= logits.topk(k).values[-1]


def _nucleus(logits: torch.Tensor, p: float = 0.5) -> torch.Tensor:
    """Tokens whose more likely tokens hold less than p of the probability."""
    probs = logits.softmax(-1)
    mass_before = (probs[None, :] * (probs[None, :] > probs[:, None])).sum(1)  # (V,)
    return mass_before < p


@pytest.mark.parametrize(
    ("filters", "allowed"), [(dict(top_k=3), _top_k_set), (dict(top_p=0.5), _nucleus)]
)
def test_sampling_draws_only_from_the_allowed_set(filters: dict, allowed) -> None:
    """40 samples of 10 tokens at temperature 1.5: every token lies in its step's top-k set /
    nucleus of the tempered distribution (recomputed by teacher forcing); without the filter
    some do not."""
    model, prompt, temperature = _model(), [5, 9, 2], 1.5
    settings = dict(strategy="sample", max_new_tokens=10, n_best=40, temperature=temperature)
    for use_filter in [True, False]:
        outside = 0
        chosen = filters if use_filter else {}
        for h in _run(model, torch.tensor([prompt]), seed=3, **settings, **chosen)[0]:
            logprobs = _step_logprobs(model, prompt, h.tokens)
            for t, token in enumerate(h.tokens):
                outside += not bool(allowed(logprobs[t] / temperature)[token])
        assert (outside == 0) if use_filter else (outside > 0)


def test_same_seed_same_samples() -> None:
    model, (ids, mask) = _model(), _prompts([4, 6], seed=5)
    settings = dict(strategy="sample", max_new_tokens=12, n_best=3, top_k=10)
    first = _run(model, ids, mask, seed=11, **settings)
    _assert_same(_run(model, ids, mask, seed=11, **settings), first)
    other = _run(model, ids, mask, seed=12, **settings)
    assert [[h.tokens for h in r] for r in other] != [[h.tokens for h in r] for r in first]
    for row in first:
        assert [h.score for h in row] == sorted((h.score for h in row), reverse=True)


@pytest.mark.parametrize(
    ("arch", "pos"),
    [("decoder", "learned"), ("decoder", "rotary"), ("decoder", "relative"),
     ("encoder_decoder", "sinusoidal"), ("encoder_decoder", "alibi"), ("rnn", "none")],
)  # fmt: skip
@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_batched_equals_one_at_a_time(arch: str, pos: str, strategy: str) -> None:
    """Rows of lengths 5, 2, 7 (left-padded for decoders, so per-row positions matter) give
    what each row gives alone, with the cache and without it; eos makes rows leave early."""
    model = _model(arch, pos)
    side = "left" if arch == "decoder" else "right"
    ids, mask = _prompts([5, 2, 7], seed=4, side=side)
    settings = dict(strategy=strategy, max_new_tokens=9, num_beams=3, seed=7, eos_id=6)
    settings["n_best"] = 1 if strategy == "greedy" else 2
    batched = _run(model, ids, mask, **settings)
    alone = [_run(model, ids[b : b + 1, mask[b].bool()], **settings)[0] for b in range(3)]
    _assert_same(batched, alone)
    _assert_same(_run(model, ids, mask, use_cache=False, **settings), batched)


def test_learned_positions_refuse_prompts_that_do_not_fit() -> None:
    model, ids = _model(pos="learned"), torch.randint(2, VOCAB, (1, 40))
    with pytest.raises(ValueError, match="40 tokens and max_new_tokens=10 need 49 positions"):
        _run(model, ids, max_new_tokens=10)
    with pytest.raises(ValueError, match="max_positions is 32"):
        generate(
            model, ids[:, :30], config=GenerationConfig(), eos_id=None, pad_id=0, max_positions=32
        )


def test_sample_text_runs_past_the_context_in_windows() -> None:
    """Learned positions of 48, a context of 16: 60 new tokens come out in windows, the same
    for the same seed."""
    model = _model(pos="learned")
    config = GenerationConfig(strategy="sample", top_k=5, seed=1)
    text = sample_text(model, [4, 5], max_new_tokens=60, config=config, max_context=16)
    assert len(text) == 62 and text[:2] == [4, 5]
    assert sample_text(model, [4, 5], max_new_tokens=60, config=config, max_context=16) == text


# --- record_attention ------------------------------------------------------------------------


@torch.no_grad()
def test_record_attention_weights_are_the_softmax_of_the_scores() -> None:
    """Left-padded decoder with ALiBi: one record per layer, weights (B, H, T, T) summing to one
    over keys, equal to softmax(q k^T / sqrt(d) + bias, masked) computed by hand for layer 0,
    and the outputs equal the SDPA path. Encoder-decoder: self and cross records."""
    model, (ids, mask) = _model(pos="alibi"), _prompts([6, 3], seed=1, side="left")
    with record_attention(model) as records:
        recorded = model(ids, mask)
    torch.testing.assert_close(recorded, model(ids, mask), atol=1e-5, rtol=1e-5)
    assert [(r.layer, r.kind) for r in records] == [
        ("backbone.blocks.0.attn", "self"),
        ("backbone.blocks.1.attn", "self"),
    ]
    weights = records[0].weights  # (B, H, T, T)
    assert weights.shape == (2, 4, 6, 6) and weights.dtype == torch.float32
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))
    torch.testing.assert_close(weights, _manual_weights(model, ids, mask), atol=1e-5, rtol=1e-5)
    assert "_recorder" not in model.backbone.blocks[0].attn.__dict__
    seq2seq = _model("encoder_decoder", "relative")
    with record_attention(seq2seq) as records:
        seq2seq(ids, mask.flip(-1), ids[:, :4])
    kinds = [(r.layer, r.kind, tuple(r.weights.shape)) for r in records]
    assert ("decoder.blocks.1.cross_attn", "cross", (2, 4, 4, 6)) in kinds
    assert ("encoder.blocks.0.attn", "self", (2, 4, 6, 6)) in kinds


def _manual_weights(model, ids, mask) -> torch.Tensor:
    stack, attn = model.backbone, model.backbone.blocks[0].attn
    x = stack.blocks[0].attn_norm(stack.embed(ids))  # (B, T, C)
    q, k, _ = attn.qkv(x).split(32, dim=2)
    q, k = (t.view(2, 6, 4, 8).transpose(1, 2) for t in (q, k))  # (B, H, T, hs)
    scores = q @ k.transpose(-2, -1) / 8**0.5 + stack.pos.attention_bias(6)
    allowed = causal_mask(6) & mask.bool()[:, None, None, :]
    allowed = allowed | ~allowed.any(-1, keepdim=True)  # a pad query sees every key
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1)
