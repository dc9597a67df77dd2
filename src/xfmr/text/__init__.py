"""Tokenizers: train from a corpus, cache, save, load."""

from xfmr.text.tokenizers import TextTokenizer, TokenizerSpec, fit_or_load, train_tokenizer

__all__ = ["TextTokenizer", "TokenizerSpec", "fit_or_load", "train_tokenizer"]
