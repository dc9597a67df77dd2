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
}

OBJECTIVE_CHOICES: dict[str, str] = {
    "CausalLMObjective": "clm",
    "MaskedLMObjective": "mlm",
    "SpanCorruptionObjective": "span_corruption",
}
