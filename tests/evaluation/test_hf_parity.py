"""Issue 41's proof: on a run exported with `xfmr-export format=hf`, xfmr's lm-eval model
(`XfmrLM`, over the run itself) and lm-eval's own `HFLM` (over the exported folder) give the same
log-likelihood per request within 1e-4, the same is_greedy, the same rolling log-likelihood over
windows, the same greedy text and the same accuracy on a multiple-choice task, for the GPT-2 and
the Llama family. Run with `-s` to see the measured differences."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = 1e-4
CHOICE_TASK = "xfmr_tiny_choice"  # conftest's choice_task
# Contexts cut from the left (block_size=16 chars here), multi-token continuations, an empty
# context, a trailing space that moves into the continuation, and single-character answers
# that share one forward (one context, continuation less its last token the same).
PAIRS = [
    ("the quick brown", " fox"),
    ("a small cat sees a big", " bird near the"),
    ("", "two owls"),
    ("the lazy dog.\na small cat sees a big bird near the river.\ntwo owls", " watch the quiet"),
    ("two owls watch the ", "quiet moon"),
    ("the quick brown fox jumps over the", " l"),
    ("the quick brown fox jumps over the", " q"),
    ("a", " small cat sees"),
]
ROLLING = [
    "the quick brown fox jumps over the lazy dog.\na small cat sees a big bird near the river.",
    "two owls",
]


def _instances(kind: str, arguments: list[tuple]) -> list:
    from lm_eval.api.instance import Instance

    return [Instance(kind, {}, args, i) for i, args in enumerate(arguments)]


@pytest.fixture(scope="module")
def models(decoders, paired_models):
    """family -> (XfmrLM over the run, HFLM over its export, with XfmrLM's length and prefix)."""

    def get(family: str):
        return paired_models(*decoders(family), batch_size=3)

    return get


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_loglikelihoods_match_hflm(models, family: str) -> None:
    ours, theirs = models(family)
    requests = _instances("loglikelihood", PAIRS)
    mine, reference = ours.loglikelihood(requests), theirs.loglikelihood(requests)
    gaps = [abs(a[0] - b[0]) for a, b in zip(mine, reference, strict=True)]
    print(f"\n[parity] {family} loglikelihood: max |xfmr - HFLM| = {max(gaps):.2e}")
    assert max(gaps) < TOLERANCE
    assert [a[1] for a in mine] == [b[1] for b in reference]
    assert all(logprob < 0 for logprob, _ in mine)
    assert len({round(logprob, 6) for logprob, _ in mine}) == len(PAIRS)  # none mixed up

    rolling = _instances("loglikelihood_rolling", [(text,) for text in ROLLING])
    mine, reference = ours.loglikelihood_rolling(rolling), theirs.loglikelihood_rolling(rolling)
    gaps = [abs(a - b) for a, b in zip(mine, reference, strict=True)]
    print(f"[parity] {family} rolling ({len(ROLLING[0])} tokens, max_length {ours.max_length}): ")
    print(f"  max |xfmr - HFLM| = {max(gaps):.2e}")
    assert max(gaps) < TOLERANCE


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_rolling_within_one_window(models, family: str) -> None:
    """A text within max_length is one window: its rolling log-likelihood is the text's given
    the prefix token alone."""
    ours, _ = models(family)
    short = "two owls watch"
    assert len(ours.tok_encode(short)) <= ours.max_length
    (rolled,) = ours.loglikelihood_rolling(_instances("loglikelihood_rolling", [(short,)]))
    ((whole, _),) = ours.loglikelihood(_instances("loglikelihood", [("", short)]))
    assert abs(rolled - whole) < 1e-5
    long = ROLLING[0]  # its windows' sum is held to HFLM's above
    assert len(ours.tok_encode(long)) > 3 * ours.max_length


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@torch.no_grad()
def test_greedy_text_matches_hf_generate(models, family: str) -> None:
    """generate_until's greedy text is what transformers' own `generate` writes on the export
    (HFLM's generate_until needs an eos token, which a char-level run has none of)."""
    ours, theirs = models(family)
    contexts = ["the quick", "two"]
    requests = _instances(
        "generate_until", [(c, {"until": ["\n"], "max_gen_toks": 5}) for c in contexts]
    )
    texts = ours.generate_until(requests)
    for context, text in zip(contexts, texts, strict=True):
        prompt = torch.tensor([ours.tok_encode(context)])
        new = theirs.model.generate(prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False)
        assert text == ours.tok_decode(new[0, prompt.size(1) :].tolist()).split("\n")[0]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_multiple_choice_accuracy_matches_hflm(models, family: str, choice_task, questions) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    ours, theirs = models(family)
    folder = choice_task()
    reports = []
    for model in (ours, theirs):
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        reports.append(
            lm_eval.simple_evaluate(model=model, tasks=[CHOICE_TASK], task_manager=manager)
        )
    scores = [report["results"][CHOICE_TASK] for report in reports]
    print(f"\n[parity] {family} {CHOICE_TASK}: acc xfmr {scores[0]['acc,none']:.3f}, HFLM ", end="")
    print(f"{scores[1]['acc,none']:.3f}")
    for metric in ("acc,none", "acc_norm,none"):
        assert scores[0][metric] == scores[1][metric]
    # Each choice's log-likelihood, as the task scored it.
    mine, reference = ([s["filtered_resps"] for s in r["samples"][CHOICE_TASK]] for r in reports)
    pairs = [
        (a, b)
        for row, other in zip(mine, reference, strict=True)
        for a, b in zip(row, other, strict=True)
    ]
    assert len(pairs) == sum(len(choices) for _, choices, _ in questions)
    assert max(abs(float(a[0]) - float(b[0])) for a, b in pairs) < TOLERANCE
    assert [a[1] for a, _ in pairs] == [b[1] for _, b in pairs]
