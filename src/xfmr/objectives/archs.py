"""Which architectures each objective can train, keyed by the objective's class name
(the `_target_` of its conf/objective/NAME.yaml); OBJECTIVE_CHOICES gives the NAME.

Kept free of torch so the CLI can check a composed config before anything heavy loads.
"""

OBJECTIVE_ARCHS: dict[str, tuple[str, ...]] = {
    # Next-token prediction needs a model that cannot see the future: a causal decoder or an RNN.
    "CausalLMObjective": ("decoder", "rnn"),
    # Masked tokens are predicted from both sides: a bidirectional encoder.
    "MaskedLMObjective": ("encoder",),
    # Spans are written out by a decoder that reads the corrupted input: an encoder-decoder.
    "SpanCorruptionObjective": ("encoder_decoder",),
    # Source -> target: an encoder reads the source, a decoder writes the target.
    "Seq2SeqObjective": ("encoder_decoder",),
    # A pooled summary: [CLS] of an encoder, or the last token a causal decoder has seen.
    "ClassificationObjective": ("encoder", "decoder"),
}

OBJECTIVE_CHOICES: dict[str, str] = {
    "CausalLMObjective": "clm",
    "MaskedLMObjective": "mlm",
    "SpanCorruptionObjective": "span_corruption",
    "Seq2SeqObjective": "seq2seq",
    "ClassificationObjective": "classification",
}

# What examples each objective consumes, and what each data module (by class name) gives:
# "text" is a token stream cut into blocks, "pairs" are source -> target examples, "labelled"
# are texts (or text pairs) with a class label.
OBJECTIVE_DATA: dict[str, str] = {
    "CausalLMObjective": "text",
    "MaskedLMObjective": "text",
    "SpanCorruptionObjective": "text",
    "Seq2SeqObjective": "pairs",
    "ClassificationObjective": "labelled",
}
DATA_KINDS: dict[str, str] = {
    "TextCorpusDataModule": "text",
    "SyntheticCorpusDataModule": "text",
    "ParallelDataModule": "pairs",
    "SyntheticTranslationDataModule": "pairs",
    "DelimitedDataModule": "labelled",
}
# conf/data/NAME.yaml choices giving each kind, for messages.
DATA_CHOICES: dict[str, tuple[str, ...]] = {
    "text": ("synthetic", "text"),
    "pairs": ("parallel", "synthetic_translation"),
    "labelled": ("delimited",),
}
