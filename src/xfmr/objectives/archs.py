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
    # A tag per word on its first piece, which must already see the whole sentence: an encoder.
    "TaggingObjective": ("encoder",),
    # A span's start and end are scored knowing the whole context, both sides: an encoder.
    "QuestionAnsweringObjective": ("encoder",),
    # BERT's pre-training: masked tokens from both sides, and [CLS] reading both sentences.
    "MaskedLMNextSentenceObjective": ("encoder",),
    "NextSentenceObjective": ("encoder",),
}

OBJECTIVE_CHOICES: dict[str, str] = {
    "CausalLMObjective": "clm",
    "MaskedLMObjective": "mlm",
    "SpanCorruptionObjective": "span_corruption",
    "Seq2SeqObjective": "seq2seq",
    "ClassificationObjective": "classification",
    "TaggingObjective": "tagging",
    "QuestionAnsweringObjective": "qa",
    "MaskedLMNextSentenceObjective": "mlm_nsp",
    "NextSentenceObjective": "nsp",
}

# What examples each objective consumes, and what each data module (by class name) gives:
# "text" is a token stream cut into blocks, "pairs" are source -> target examples, "labelled"
# are texts (or text pairs) with a class label, "tagged" are sentences of words with a tag each,
# "questions" are questions with a context paragraph and answer spans in it, "documents" are
# documents of sentences (one per line, documents apart by a blank line).
OBJECTIVE_DATA: dict[str, str] = {
    "CausalLMObjective": "text",
    "MaskedLMObjective": "text",
    "SpanCorruptionObjective": "text",
    "Seq2SeqObjective": "pairs",
    "ClassificationObjective": "labelled",
    "TaggingObjective": "tagged",
    "QuestionAnsweringObjective": "questions",
    "MaskedLMNextSentenceObjective": "documents",
    "NextSentenceObjective": "documents",
}
DATA_KINDS: dict[str, str] = {
    "TextCorpusDataModule": "text",
    "SyntheticCorpusDataModule": "text",
    "ParallelDataModule": "pairs",
    "SyntheticTranslationDataModule": "pairs",
    "DelimitedDataModule": "labelled",
    "ConllDataModule": "tagged",
    "SquadDataModule": "questions",
    "DocumentsDataModule": "documents",
}
# Data whose kind is a config value, `data.kind`, with the kinds it can give (keyed like
# DATA_KINDS, by the last part of the data group's `_target_`; data=hf's is a builder).
CONFIGURED_DATA_KINDS: dict[str, tuple[str, ...]] = {
    "hf_datamodule": ("text", "labelled", "pairs"),
}
# conf/data/NAME.yaml choices giving each kind, for messages.
DATA_CHOICES: dict[str, tuple[str, ...]] = {
    "text": ("synthetic", "text", "hf"),
    "pairs": ("parallel", "synthetic_translation", "hf"),
    "labelled": ("delimited", "hf"),
    "tagged": ("conll",),
    "questions": ("squad",),
    "documents": ("documents",),
}
# Objectives that put two sentences in segments 0 and 1: they need model.type_vocab_size >= 2.
OBJECTIVE_SEGMENTS: dict[str, int] = {
    "MaskedLMNextSentenceObjective": 2,
    "NextSentenceObjective": 2,
    "QuestionAnsweringObjective": 2,  # question and context
}
# objective.head choices of objective=mlm: BERT's MLM head, or one tied linear projection.
MLM_HEADS = ("bert", "linear")
