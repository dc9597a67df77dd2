"""An xfmr tokenizer as a Hugging Face `PreTrainedTokenizerFast`: the same `tokenizers` object,
its special tokens declared by role (pad, unk, cls, sep, mask, bos, eos) so that pipelines find
them, and a post-processor that adds the specials a task's inputs carry ([CLS] A [SEP], A </s>),
so `AutoTokenizer.from_pretrained(DIR)(text)` gives the ids the run's model was fed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from xfmr.text.tokenizers import TextTokenizer

# Role -> the tokens xfmr's tokenizers and objectives use for it, in order of preference.
ROLES = {
    "pad_token": ("[PAD]", "<pad>"),
    "unk_token": ("[UNK]", "<unk>"),
    "cls_token": ("[CLS]",),
    "sep_token": ("[SEP]",),
    "mask_token": ("[MASK]",),
    "bos_token": ("<s>",),
    "eos_token": ("</s>",),
}


@dataclass(frozen=True)
class Template:
    """What `tokenizer(text)` / `tokenizer(text, pair)` add around the pieces, in
    `TemplateProcessing` syntax (`$A`, `$B:1`, `[SEP]:1`)."""

    single: str
    pair: str | None = None

    def tokens(self) -> list[str]:
        words = f"{self.single} {self.pair or ''}".split()
        return sorted({w.split(":")[0] for w in words if not w.startswith("$")})


def special_tokens(tokenizer: TextTokenizer) -> dict[str, str]:
    """Role -> token, for each role one of whose tokens the vocabulary has."""
    found = {}
    for role, candidates in ROLES.items():
        token = next((t for t in candidates if tokenizer.token_to_id(t) is not None), None)
        if token is not None:
            found[role] = token
    return found


def hf_tokenizer(
    tokenizer: TextTokenizer,
    *,
    template: Template | None,
    max_length: int | None,
    segments: bool = False,
) -> Any:
    """The `PreTrainedTokenizerFast` of `tokenizer`; `save_pretrained(DIR)` writes
    tokenizer.json and tokenizer_config.json. `segments`: it returns token_type_ids too
    (BERT's segment ids, which a pair's template sets)."""
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer.from_str(tokenizer.tokenizer.to_str())  # a copy: the run's stays as it is
    if template is not None:
        inner.post_processor = TemplateProcessing(
            single=template.single,
            pair=template.pair,
            special_tokens=[(t, tokenizer.token_to_id(t)) for t in template.tokens()],
        )
    else:
        inner.post_processor = None
    extra: dict[str, Any] = {"model_max_length": max_length} if max_length else {}
    if segments:
        extra["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    return PreTrainedTokenizerFast(
        tokenizer_object=inner,
        clean_up_tokenization_spaces=False,  # decode as the tokenizer's own decoder does
        **special_tokens(tokenizer),
        **extra,
    )
