"""The recurrent language model the lectures start from, as a baseline (Mikolov et al. 2010;
Zaremba et al. 2014 for the LSTM with dropout between layers)."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.weights import ParameterCount, init_weights

# rnn_cell -> torch recurrent layer, built as cls(input, hidden, num_layers=..., dropout=...).
RNN_CELLS: dict[str, type[nn.RNNBase]] = {
    "gru": nn.GRU,  # Cho et al. 2014
    "lstm": nn.LSTM,  # Hochreiter & Schmidhuber 1997
    "tanh": nn.RNN,  # Elman 1990; nn.RNN's default nonlinearity is tanh
}


class RNNLM(ParameterCount, nn.Module):
    """Embedding -> dropout -> recurrent layers (hidden = d_model) -> dropout -> LM head.

    The head is tied to the embedding when `tie_embeddings` (Press & Wolf 2017; possible because
    the hidden size is d_model). Causal by construction, so it needs no positions and no mask:
    `attention_mask` is accepted for a common interface and ignored, which is exact for right
    padding (pads come after every real token); left padding would feed pads into the state.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.rnn = RNN_CELLS[config.rnn_cell](
            config.d_model,
            config.d_model,
            num_layers=config.n_layers,
            dropout=config.dropout if config.n_layers > 1 else 0.0,  # between layers only
            batch_first=True,
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_weights(self, config)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids: (B, T) -> logits (B, T, V)."""
        hidden, _ = self.rnn(self.drop(self.tok_emb(input_ids)))  # (B, T, C)
        return self.lm_head(self.drop(hidden))
