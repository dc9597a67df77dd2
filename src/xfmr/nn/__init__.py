"""Plain PyTorch modules: attention, positions, blocks, models. No Lightning, no Hydra, no I/O.

Names are imported lazily so that `xfmr.nn.config` (the dataclass the CLI checks a config
against before anything heavy loads) does not pull in torch.
"""

from importlib import import_module

_EXPORTS = {
    "AttentionRecord": "xfmr.nn.attention",
    "CrossAttention": "xfmr.nn.attention",
    "KVCache": "xfmr.nn.cache",
    "LayerCache": "xfmr.nn.cache",
    "MultiHeadAttention": "xfmr.nn.attention",
    "causal_mask": "xfmr.nn.masks",
    "combine_masks": "xfmr.nn.masks",
    "fold_masks": "xfmr.nn.masks",
    "padding_mask": "xfmr.nn.masks",
    "record_attention": "xfmr.nn.attention",
    "ModelConfig": "xfmr.nn.config",
    "PosConfig": "xfmr.nn.config",
    "Encoder": "xfmr.nn.encoder",
    "EncoderLM": "xfmr.nn.encoder",
    "EncoderDecoder": "xfmr.nn.encoder_decoder",
    "EncoderPretraining": "xfmr.nn.heads",
    "MLMHead": "xfmr.nn.heads",
    "Pooler": "xfmr.nn.heads",
    "SequenceClassifier": "xfmr.nn.heads",
    "RMSNorm": "xfmr.nn.layers",
    "CausalLM": "xfmr.nn.models",
    "DecoderOnly": "xfmr.nn.models",
    "MODELS": "xfmr.nn.models",
    "build_model": "xfmr.nn.models",
    "init_weights": "xfmr.nn.weights",
    "POSITIONS": "xfmr.nn.positions",
    "build_positions": "xfmr.nn.positions",
    "relative_position_bucket": "xfmr.nn.positions",
    "sinusoidal_table": "xfmr.nn.positions",
    "RNNLM": "xfmr.nn.rnn",
    "TransformerStack": "xfmr.nn.stack",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'xfmr.nn' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
