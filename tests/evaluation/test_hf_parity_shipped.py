"""Issue 41 on the tasks xfmr ships: on a run exported with `xfmr-export format=hf`, xfmr's
lm-eval model (`XfmrLM`, over the run) and lm-eval's own `HFLM` (over the exported folder) give
the same accuracy on every shipped multiple-choice task (xfmr_minimal_pairs, a group of three,
and xfmr_next_line; acc_norm too) and the same log-likelihood per request within 1e-4, for the
GPT-2 and the Llama family. The run trains on a play (conftest's `play_decoders`) whose
block_size holds every request whole, so both models score each as one window (HFLM refuses a
continuation past max_length, which XfmrLM scores in pieces). xfmr_translation generates and has
no choices: it is not here. Run with `-s` to see the figures."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = 1e-4
TASKS = ["xfmr_minimal_pairs", "xfmr_next_line"]
LEAVES = [
    "xfmr_minimal_pairs_agreement",
    "xfmr_minimal_pairs_agreement_relative_clause",
    "xfmr_minimal_pairs_a_an",
    "xfmr_next_line",
]
LIMIT = 16  # questions per task: 3 x 16 pairs and 16 four-ending next lines, 160 requests


def _reports(models, prepared) -> list[dict]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(prepared.include_path), include_defaults=False)
    return [
        lm_eval.simple_evaluate(
            model=model,
            tasks=prepared.names,
            task_manager=manager,
            limit=LIMIT,
            log_samples=True,
        )
        for model in models
    ]


def _requests(report: dict, leaf: str) -> list[tuple[tuple[str, str], float, bool]]:
    """(arguments, log-likelihood, greedy) of each request of `leaf`, in document order, as
    the task scored them (`filtered_resps`, which must be the raw `resps`)."""
    rows = []
    for sample in sorted(report["samples"][leaf], key=lambda s: s["doc_id"]):
        for arguments, resps, (logprob, greedy) in zip(
            sample["arguments"], sample["resps"], sample["filtered_resps"], strict=True
        ):
            assert [float(r) for r in resps[0]] == [float(logprob), float(greedy)]
            rows.append((tuple(arguments), float(logprob), bool(greedy)))
    return rows


def _longest_request(model, requests) -> int:
    """Tokens of the longest input a request reads: its context (the prefix token where it is
    empty) and its continuation."""
    return max(
        max(len(model.tok_encode(context)), 1) + len(model.tok_encode(continuation))
        for (context, continuation), _, _ in requests
    )


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_shipped_tasks_match_hflm(play_decoders, paired_models, family: str, tmp_path) -> None:
    from xfmr.evaluation.tasks import prepare_tasks
    from xfmr.runs.loading import load_run

    run_dir, folder = play_decoders(family)
    prepared = prepare_tasks(load_run(run_dir), TASKS, tasks_dir=None, work_dir=tmp_path)
    ours, theirs = models = paired_models(run_dir, folder, batch_size=8)
    mine, reference = _reports(models, prepared)

    gaps, longest = [], 0
    for leaf in LEAVES:
        a, b = _requests(mine, leaf), _requests(reference, leaf)
        assert [r[0] for r in a] == [r[0] for r in b]
        assert len(a) == LIMIT * (4 if leaf == "xfmr_next_line" else 2)
        # Nothing cut: each request is one window of both models.
        longest = max(longest, _longest_request(ours, a))
        assert longest <= ours.max_length == theirs.max_length
        assert [r[2] for r in a] == [r[2] for r in b]
        assert len({round(r[1], 6) for r in a}) > len(a) // 2  # distinct: none mixed up
        gaps += [abs(x[1] - y[1]) for x, y in zip(a, b, strict=True)]
    print(f"\n[parity] {family}: {len(gaps)} requests, the longest {longest} tokens ", end="")
    print(f"(max_length {ours.max_length}): max |xfmr - HFLM| = {max(gaps):.2e}")
    assert max(gaps) < TOLERANCE

    for name in dict.fromkeys([*TASKS, *LEAVES]):
        scores = [report["results"][name] for report in (mine, reference)]
        metrics = ["acc,none", "acc_norm,none"] if name == "xfmr_next_line" else ["acc,none"]
        for metric in metrics:
            print(f"[parity] {family} {name} {metric}: xfmr {scores[0][metric]:.4f}, ", end="")
            print(f"HFLM {scores[1][metric]:.4f}")
            assert scores[0][metric] == scores[1][metric]
