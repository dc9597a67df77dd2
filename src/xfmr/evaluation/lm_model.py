"""`XfmrLM`: lm-evaluation-harness's language-model interface over a loaded xfmr run, without
converting it. lm-eval asks three things of a model (`lm_eval.api.model.LM`):

- `loglikelihood`: log p(continuation | context) and whether greedy decoding would write the
  continuation. Tokenized as lm-eval's `HFLM` tokenizes (`TemplateLM._encode_pair`: a decoder
  encodes context + continuation whole and splits at the context's length; an encoder-decoder
  encodes the two apart, the context as its source with the objective's </s>), contexts cut
  from the left to `max_length`, requests sorted longest first and scored a batch per forward;
  a decoder's continuation longer than `max_length` is scored in pieces, where HFLM stops.
- `loglikelihood_rolling`: a text's whole log-likelihood, over the disjoint windows of
  `lm_eval.utils.get_rolling_token_windows` (each token predicted once, with as much context
  as `max_length` allows), for texts past the length the run trained on.
- `generate_until`: through xfmr's generation (`xfmr.evaluation.generating`).

Decoders (arch=decoder, rnn) and encoder-decoders (the context as the source, the continuation
scored by the decoder); an encoder-only model is refused. `HFLM` on the run's `xfmr-export
format=hf` folder gives the same numbers (tests/evaluation/test_hf_parity.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lm_eval import utils
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import Collator

from xfmr.errors import UserError
from xfmr.objectives.common import pad_rows
from xfmr.runs.inference import input_limit, text_task
from xfmr.runs.loading import LoadedRun

# A request: ((context, continuation) or None, context ids, continuation ids), as TemplateLM
# hands them to `_loglikelihood_tokens`.
Request = tuple[tuple[str, str] | None, list[int], list[int]]

# The token an empty context (and a rolling text's first window) is conditioned on, in order
# of preference: HFLM takes the tokenizer's bos, else its eos.
PREFIX_TOKENS = ("<s>", "</s>", "<|endoftext|>")
# Where the run names no length to cut contexts at (HFLM's default).
DEFAULT_MAX_LENGTH = 2048


def refuse_encoder(run: LoadedRun) -> None:
    if run.model_config.arch == "encoder":
        raise UserError(
            f"run_dir={str(run.files.run_dir)!r} is an encoder-only model (arch=encoder, "
            f"objective={run.objective.name}): it sees the whole text at once, so it gives no "
            "probability of a continuation and writes none; lm-eval tasks need a decoder "
            "(arch=decoder or rnn) or an encoder-decoder"
        )


def prefix_token(run: LoadedRun) -> int:
    """bos, else eos, else the first special token (a char or BPE run with only <unk>): what
    the model reads where a request gives no context."""
    for token in PREFIX_TOKENS:
        found = run.tokenizer.token_to_id(token)
        if found is not None:
            return found
    specials = sorted(run.tokenizer.special_ids())
    return specials[0] if specials else text_task(run).pad_id


class XfmrLM(TemplateLM):
    """lm-eval's model over a loaded run (`xfmr.runs.loading.load_run`).

    Args:
        run: the loaded run, its model in eval mode on its device.
        batch_size: requests scored (or rows decoded) per forward.
        max_length: the most tokens one input holds; longer contexts are cut from the left.
            None: the shorter of the position table and the length the run trained on.
        prefix_token_id: the token an empty context is read as; None: `prefix_token(run)`.
    """

    def __init__(
        self,
        run: LoadedRun,
        *,
        batch_size: int = 16,
        max_length: int | None = None,
        prefix_token_id: int | None = None,
    ) -> None:
        super().__init__()
        refuse_encoder(run)
        self.run = run
        self.task = text_task(run)
        self.backend = "seq2seq" if run.model_config.arch == "encoder_decoder" else "causal"
        self.batch_size = batch_size
        self._max_length = max_length or input_limit(run)[0] or DEFAULT_MAX_LENGTH
        self._prefix = prefix_token(run) if prefix_token_id is None else prefix_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def eot_token_id(self) -> int:
        return self.task.eos_id if self.task.eos_id is not None else self._prefix

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def device(self) -> torch.device:
        return self.run.device

    @property
    def tokenizer_name(self) -> str:
        return str(self.run.files.tokenizer)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **_) -> list[int]:
        """The run's tokenizer; an encoder-decoder's source ends with the objective's </s>
        unless `add_special_tokens=False` (as the exported HF tokenizer adds it)."""
        ids = self.run.tokenizer.encode(string)
        if self.backend == "seq2seq" and add_special_tokens is not False:
            ids += self.task.source_suffix
        return ids

    def tok_decode(self, tokens: list[int]) -> str:
        hidden = self.task.hidden_ids | self.run.tokenizer.special_ids()
        return self.run.tokenizer.decode([t for t in tokens if t not in hidden])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        if self.backend == "seq2seq":
            raise UserError(
                "loglikelihood_rolling (a text's perplexity) needs a decoder: an "
                "encoder-decoder scores a target given a source, and a perplexity task gives none"
            )
        windows: list[Request] = []
        owners: list[int] = []
        for index, (text,) in enumerate(request.args for request in requests):
            for context, continuation in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, context, continuation))
                owners.append(index)
        totals = [0.0] * len(requests)
        for owner, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows), strict=True):
            totals[owner] += logprob
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from xfmr.evaluation.generating import generate_until

        return generate_until(self, [request.args for request in requests])

    def _loglikelihood_tokens(self, requests: list[Request], **_) -> list[tuple[float, bool]]:
        """Each request's (log-likelihood, greedy). A decoder's continuation longer than
        `max_length` (a long sentence of a minimal pair, with no context, for a model of short
        blocks) is scored in pieces of `max_length` tokens, each read after as much of what
        precedes it as fits, as `loglikelihood_rolling`'s windows score a text: the pieces'
        log-likelihoods add up, and it is greedy where every piece is. HFLM stops there at an
        assertion; every request it can score is scored here as it scores it."""
        if self.backend != "causal" or all(len(r[2]) <= self.max_length for r in requests):
            return self._scored(requests)
        pieces: list[Request] = []
        owners: list[int] = []
        for index, (key, context, continuation) in enumerate(requests):
            whole = len(continuation) <= self.max_length
            for start in range(0, len(continuation), self.max_length):
                piece = continuation[start : start + self.max_length]
                pieces.append((key if whole else None, context + continuation[:start], piece))
                owners.append(index)
        totals = [(0.0, True)] * len(requests)
        for owner, (logprob, greedy) in zip(owners, self._scored(pieces), strict=True):
            total, all_greedy = totals[owner]
            totals[owner] = (total + logprob, all_greedy and greedy)
        for (key, _, continuation), score in zip(requests, totals, strict=True):
            if key is not None and len(continuation) > self.max_length:
                self.cache_hook.add_partial("loglikelihood", key, score)
        return totals

    # Batching alone, as HFLM does, with its exact reuse: requests whose context + continuation
    # minus its last token are the same ids (single-token answers to one question) share one
    # forward (Collator's group_by="contexts"). Computing a shared context once in the KV cache
    # and then each continuation was not done: lm-eval cuts each request from the left to its
    # own length, so choices of one question need not share a prefix; an RNN keeps a state, not
    # a cache; and the padded continuations would need their own masks and positions past the
    # cache. Multiple-choice contexts here are a sentence or two, so the saving is small.
    @torch.no_grad()
    def _scored(self, requests: list[Request]) -> list[tuple[float, bool]]:
        def longest_first(request: Request) -> tuple[int, tuple[int, ...]]:
            ids = request[1] + request[2]
            return -len(ids), tuple(ids)

        order = Collator(
            requests,
            sort_fn=longest_first,
            group_by="contexts" if self.backend == "causal" else None,
            group_fn=lambda request: request[-2] + request[-1][:-1],
        )
        scores: list[tuple[float, bool]] = []
        for chunk in order.get_batched(n=self.batch_size):
            for (key, context, continuation), logprobs in zip(
                chunk, self._continuation_logprobs(chunk), strict=True
            ):
                greedy = logprobs.argmax(-1)  # (1, L)
                for shared_key, tokens, row in order.get_cache(
                    req_str=key, cxt_toks=context, cont_toks=continuation, logits=logprobs
                ):
                    scores.append(self._score(shared_key, tokens, row, greedy))
        return order.get_original(scores)

    def _score(
        self, key, tokens: list[int], logprobs: torch.Tensor, greedy: torch.Tensor
    ) -> tuple[float, bool]:
        """Sum of the continuation's log-probs (1, L, V), and whether each is the argmax."""
        target = torch.tensor(tokens, dtype=torch.long, device=logprobs.device).unsqueeze(0)
        is_greedy = bool((greedy[:, -target.size(1) :] == target).all())
        logprob = float(torch.gather(logprobs, 2, target.unsqueeze(-1)).sum())
        if key is not None:
            self.cache_hook.add_partial("loglikelihood", key, (logprob, is_greedy))
        return logprob, is_greedy

    def _continuation_logprobs(self, chunk: list[Request]) -> list[torch.Tensor]:
        """Each request's log-probs over its continuation's positions, (1, L, V)."""
        longest = max(len(continuation) for _, _, continuation in chunk)
        if longest > self.max_length:
            raise UserError(
                f"a continuation of {longest} tokens is longer than the {self.max_length} the "
                "decoder of this encoder-decoder reads at once (max_length): it cannot be scored"
            )
        if self.backend == "seq2seq":
            return self._seq2seq_logprobs(chunk)
        # Context + continuation less its last token, cut from the left (HFLM's window).
        rows = [
            (context + continuation)[-(self.max_length + 1) :][:-1]
            for _, context, continuation in chunk
        ]
        ids, _ = pad_rows(rows, self.task.pad_id)  # (B, T), right-padded
        # No mask: a causal model's positions before a right pad never see it.
        logprobs = F.log_softmax(self.run.model(ids.to(self.device)).float(), dim=-1)  # (B, T, V)
        return [
            logprobs[i, len(row) - len(continuation) : len(row)].unsqueeze(0)
            for i, (row, (_, _, continuation)) in enumerate(zip(rows, chunk, strict=True))
        ]

    def _seq2seq_logprobs(self, chunk: list[Request]) -> list[torch.Tensor]:
        """The context is the source; the decoder reads its start token and the continuation
        shifted right (teacher forcing), as HF's `labels=` does."""
        if self.task.decoder_start_id is None:
            raise UserError("this encoder-decoder run names no decoder start token")
        sources = [context[-self.max_length :] for _, context, _ in chunk]
        targets = [[self.task.decoder_start_id, *continuation[:-1]] for _, _, continuation in chunk]
        source_ids, source_mask = pad_rows(sources, self.task.pad_id)  # (B, S)
        target_ids, target_mask = pad_rows(targets, self.task.pad_id)  # (B, T)
        logits = self.run.model(
            source_ids.to(self.device),
            source_mask.to(self.device),
            target_ids.to(self.device),
            target_mask.to(self.device),
        )
        logprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
        return [logprobs[i, : len(row)].unsqueeze(0) for i, row in enumerate(targets)]
