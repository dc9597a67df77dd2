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

# The recurrence's state between calls: h, or (h, c) for an LSTM, each (n_layers, B, d_model).
RecurrentState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


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
        self.tok_emb = nn.Embedding(config.padded_vocab_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.rnn = RNN_CELLS[config.rnn_cell](
            config.d_model,
            config.d_model,
            num_layers=config.n_layers,
            dropout=config.dropout if config.n_layers > 1 else 0.0,  # between layers only
            batch_first=True,
        )
        self.lm_head = nn.Linear(config.d_model, config.padded_vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_weights(self, config)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids: (B, T) -> logits (B, T, V)."""
        hidden, _ = self.rnn(self.drop(self.tok_emb(input_ids)))  # (B, T, C)
        return self.lm_head(self.drop(hidden))

    def run(
        self,
        input_ids: torch.Tensor,
        *,
        state: RecurrentState | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, RecurrentState]:
        """Continue the recurrence from `state` (None: zeros) over input_ids (B, T): logits
        (B, T, V) and the state after each row's last real token, for decoding step by step.

        lengths: (B,) real lengths of right-padded rows, >= 1; pads then leave the state alone
        (their logits are those of a zero hidden state).
        """
        x = self.drop(self.tok_emb(input_ids))  # (B, T, C)
        if lengths is None:
            hidden, state = self.rnn(x, state)
        else:
            packed = nn.utils.rnn.pack_padded_sequence(
                x, lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            hidden, state = self.rnn(packed, state)
            hidden, _ = nn.utils.rnn.pad_packed_sequence(
                hidden, batch_first=True, total_length=x.size(1)
            )  # (B, T, C)
        return self.lm_head(self.drop(hidden)), state
