"""XfmrLM beyond what HFLM's parity holds: generate_until's stop sequences, sampling and
max_gen_toks; continuations longer than max_length; the runs it refuses, each in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xfmr.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def _instances(kind: str, arguments: list[tuple]) -> list:
    from lm_eval.api.instance import Instance

    return [Instance(kind, {}, args, i) for i, args in enumerate(arguments)]


@pytest.fixture(scope="module")
def lm(decoders):
    from xfmr.evaluation.lm_model import XfmrLM
    from xfmr.runs.loading import load_run

    run_dir, _ = decoders("gpt2")
    return XfmrLM(load_run(run_dir), batch_size=4)


def test_generate_until_cuts_at_the_first_stop_sequence(lm) -> None:
    (full,) = lm.generate_until(_instances("generate_until", [("the quick", {"max_gen_toks": 12})]))
    assert 0 < len(full) <= 12  # one character per token
    stop, later = full[3:5], full[6:]
    requests = _instances(
        "generate_until",
        [
            ("the quick", {"until": [stop], "max_gen_toks": 12}),
            ("the quick", {"until": [later, stop], "max_gen_toks": 12}),  # the first to occur
            ("the quick", {"until": stop, "max_gen_toks": 2}),  # a string; cut short first
            ("two", {"until": [stop], "max_gen_toks": 12}),
        ],
    )
    cut, either, short, other = lm.generate_until(requests)
    assert cut == either == full.split(stop)[0]
    assert len(cut) < len(full) and stop not in cut
    assert short == full[:2]
    assert stop not in other


def test_generate_until_samples_when_asked(lm) -> None:
    def sample(seed: int) -> str:
        kwargs = {"do_sample": True, "temperature": 1.5, "seed": seed, "max_gen_toks": 10}
        return lm.generate_until(_instances("generate_until", [("the", kwargs)]))[0]

    greedy = lm.generate_until(
        _instances("generate_until", [("the", {"max_gen_toks": 10, "temperature": 0.0})])
    )[0]
    draws = [sample(seed) for seed in range(4)]
    assert sample(0) == draws[0]  # a seed gives the same text
    assert len(set(draws)) > 1 and any(draw != greedy for draw in draws)


def test_a_continuation_longer_than_max_length_is_scored_in_pieces(lm) -> None:
    """Where HFLM stops at an assertion: pieces of max_length tokens, each read after as much
    of what precedes it as fits; their log-likelihoods add up, greedy where each piece is."""
    context = lm.tok_encode("the")
    long = lm.tok_encode(" quick brown fox jumps over the lazy dog.")
    assert 2 * lm.max_length < len(long)
    cut = [lm.max_length, 2 * lm.max_length]
    pieces = [long[: cut[0]], long[cut[0] : cut[1]], long[cut[1] :]]
    parts = lm._loglikelihood_tokens(
        [
            (None, context + long[:start], piece)
            for start, piece in zip([0, *cut], pieces, strict=True)
        ]
    )
    ((logprob, greedy),) = lm._loglikelihood_tokens([(None, context, long)])
    assert logprob == pytest.approx(sum(p for p, _ in parts), abs=1e-4)
    assert greedy == all(g for _, g in parts)
    (through_lm_eval,) = lm.loglikelihood(
        _instances("loglikelihood", [("the", " quick brown fox jumps over the lazy dog.")])
    )
    assert through_lm_eval[0] == pytest.approx(logprob, abs=1e-4)


def test_encoder_only_run_is_refused_in_one_line() -> None:
    from xfmr.evaluation.lm_model import XfmrLM

    encoder = SimpleNamespace(
        model_config=SimpleNamespace(arch="encoder"),
        files=SimpleNamespace(run_dir="RUN"),
        objective=SimpleNamespace(name="mlm"),
    )
    with pytest.raises(UserError) as refused:
        XfmrLM(encoder)
    message = str(refused.value)
    assert "\n" not in message
    assert "encoder-only" in message and "decoder" in message
