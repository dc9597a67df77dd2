"""Task heads on an encoder's hidden states, and BERT's pre-training model (Devlin et al. 2019).

`MLMHead` predicts masked tokens at every position; `Pooler` summarises a sequence by its first
token; `SequenceClassifier` maps that summary to classes (next-sentence prediction is the two-class
case). `EncoderPretraining` puts the three on an `Encoder`, with BERT's layout, so a
`BertForPreTraining` checkpoint maps onto it one tensor to one tensor; `EncoderMaskedLM` and
`EncoderNextSentence` are its masked-LM and next-sentence halves, with the same weight names.
"""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.encoder import Encoder
from xfmr.nn.layers import ACTIVATIONS, build_norm
from xfmr.nn.mup import Readout, readout_multiplier
from xfmr.nn.weights import ParameterCount, init_weights


class MLMHead(nn.Module):
    """BERT's masked-LM head: dense d -> d, activation, norm, then a projection onto the
    vocabulary with an output-only bias per token (Devlin et al. 2019; `BertLMPredictionHead`).

    Args:
        d_model: width of the hidden states.
        vocab_size: number of output tokens.
        activation: a non-gated name from `xfmr.nn.layers.ACTIVATIONS` (BERT: the FFN's).
        norm: a name from `xfmr.nn.layers.NORMS`.
        norm_eps: the norm's epsilon.
        bias: whether the dense layer and the norm carry a bias (the output bias always exists).
        embedding: a token embedding to tie the output projection to (Press & Wolf 2017);
            None gives the projection its own weight.
        multiplier: the projection's input multiplier (µP's readout, `xfmr.nn.mup`); None: none.
    """

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        *,
        activation: str,
        norm: str,
        norm_eps: float,
        bias: bool = True,
        embedding: nn.Embedding | None = None,
        multiplier: float | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS or ACTIVATIONS[activation].gated:
            plain = sorted(name for name, act in ACTIVATIONS.items() if not act.gated)
            raise ValueError(f"MLMHead activation={activation!r} must be one of {plain}")
        self.dense = nn.Linear(d_model, d_model, bias=bias)
        self.act = ACTIVATIONS[activation].make()
        self.norm = build_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.decoder = Readout(d_model, vocab_size, bias=False, multiplier=multiplier)
        if embedding is not None:
            self.decoder.weight = embedding.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: (B, T, C) -> logits (B, T, V)."""
        return self.decoder(self.norm(self.act(self.dense(hidden)))) + self.bias


class Pooler(nn.Module):
    """The first token's hidden state through dense + tanh (BERT's `[CLS]` summary).

    Args:
        d_model: width of the hidden states.
        bias: whether the dense layer carries a bias.
    """

    def __init__(self, d_model: int, *, bias: bool = True) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: (B, T, C) -> pooled (B, C)."""
        return torch.tanh(self.dense(hidden[:, 0]))


class SequenceClassifier(nn.Module):
    """Dropout and one linear layer from a pooled summary to class logits.

    With `n_classes=2` on BERT's pooled output this is its next-sentence head (`seq_relationship`,
    which has no dropout in `BertForPreTraining`).

    Args:
        d_model: width of the pooled summary.
        n_classes: number of classes.
        dropout: dropout on the summary before the projection.
        multiplier: the projection's input multiplier (µP's readout, `xfmr.nn.mup`); None: none.
    """

    def __init__(
        self, d_model: int, n_classes: int, *, dropout: float = 0.0, multiplier: float | None = None
    ) -> None:
        super().__init__()
        if n_classes < 1:
            raise ValueError(f"n_classes={n_classes} must be a positive integer")
        self.dropout = nn.Dropout(dropout)
        self.proj = Readout(d_model, n_classes, multiplier=multiplier)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled: (B, C) -> logits (B, n_classes)."""
        return self.proj(self.dropout(pooled))


class EncoderPretraining(ParameterCount, nn.Module):
    """BERT pre-training (Devlin et al. 2019, sec. 3.1): an Encoder, a masked-LM head tied to the
    token embedding when `tie_embeddings`, and next-sentence prediction on the pooled first token.

    Args:
        config: the model's shape; `arch` should be "encoder".
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Encoder(config)
        self.mlm = bert_mlm_head(config, self.backbone)
        self.pooler = Pooler(config.d_model, bias=config.bias)
        self.nsp = SequenceClassifier(config.d_model, 2, multiplier=readout_multiplier(config))
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
        n_documents: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids (B, T) -> (mlm_logits (B, T, V), nsp_logits (B, 2)).

        attention_mask: (B, T), 1 for real tokens. token_type_ids: (B, T) segment ids.
        In packed rows, document_ids (R, T) name each token's sentence pair (-1: padding) and
        n_documents how many there are: mlm_logits (R, T, V) and nsp_logits (n_documents, 2),
        each pair's from its own first token ([CLS]), in pair order.
        """
        hidden = self.backbone(
            input_ids, attention_mask, token_type_ids, document_ids=document_ids
        )  # (B, T, C)
        firsts = hidden  # the Pooler reads position 0 of each row
        if document_ids is not None:
            if n_documents is None:
                raise ValueError("packed rows (document_ids) need n_documents, the pairs' count")
            pooled = pool_documents(hidden, document_ids, n_documents, "first")  # (n, C)
            firsts = pooled[:, None]  # (n, 1, C): each pair's [CLS] as a row of its own
        return self.mlm(hidden), self.nsp(self.pooler(firsts))


def bert_mlm_head(config: ModelConfig, backbone: Encoder) -> MLMHead:
    """BERT's MLM head for `config`, tied to `backbone`'s token embedding when `tie_embeddings`."""
    return MLMHead(
        config.d_model,
        config.padded_vocab_size,
        activation=config.activation,
        norm=config.norm,
        norm_eps=config.norm_eps,
        bias=config.bias,
        embedding=backbone.tok_emb if config.tie_embeddings else None,
        multiplier=readout_multiplier(config),
    )


class EncoderMaskedLM(ParameterCount, nn.Module):
    """Masked-LM pre-training alone (Devlin et al. 2019; RoBERTa drops NSP, Liu et al. 2019): an
    Encoder and BERT's MLM head, named as in `EncoderPretraining` (`backbone.*`, `mlm.*`) so
    weights move between the two and a fine-tuning run takes `backbone.*`.

    Args:
        config: the model's shape; `arch` should be "encoder".
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Encoder(config)
        self.mlm = bert_mlm_head(config, self.backbone)
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V); document_ids: (B, T) in packed rows."""
        hidden = self.backbone(input_ids, attention_mask, token_type_ids, document_ids=document_ids)
        return self.mlm(hidden)


class EncoderNextSentence(ParameterCount, nn.Module):
    """Next-sentence prediction alone: an Encoder, BERT's pooler and the two-way NSP classifier,
    named as in `EncoderPretraining` (`backbone.*`, `pooler.*`, `nsp.*`) without the MLM head,
    whose vocabulary-sized projection NSP would compute and throw away.

    Args:
        config: the model's shape; `arch` should be "encoder", with `type_vocab_size >= 2`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Encoder(config)
        self.pooler = Pooler(config.d_model, bias=config.bias)
        self.nsp = SequenceClassifier(config.d_model, 2, multiplier=readout_multiplier(config))
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
        n_documents: int | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> nsp_logits (B, 2); in packed rows (document_ids (R, T), each
        token's pair, -1 for padding) nsp_logits (n_documents, 2), each pair's from its own
        [CLS], in pair order, as `EncoderPretraining` reads them."""
        hidden = self.backbone(
            input_ids, attention_mask, token_type_ids, document_ids=document_ids
        )  # (B, T, C)
        if document_ids is not None:
            if n_documents is None:
                raise ValueError("packed rows (document_ids) need n_documents, the pairs' count")
            hidden = pool_documents(hidden, document_ids, n_documents, "first")[:, None]
        return self.nsp(self.pooler(hidden))


POOLINGS = ("first", "last", "mean")


class SequenceClassification(ParameterCount, nn.Module):
    """A backbone (BERT-style encoder or GPT-style decoder) summarised into one vector per
    sequence, then classified: `first` pools [CLS] through BERT's Pooler, `last` takes the last
    real token (a causal decoder has seen everything there), `mean` averages real tokens.

    Args:
        config: the backbone's shape; arch "encoder" or "decoder".
        n_classes: number of labels.
        pooling: one of POOLINGS.
    """

    def __init__(self, config: ModelConfig, *, n_classes: int, pooling: str = "first") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is not one of {list(POOLINGS)}")
        from xfmr.nn.models import DecoderOnly

        backbones = {"encoder": Encoder, "decoder": DecoderOnly}
        if config.arch not in backbones:
            raise ValueError(
                f"classification needs arch in {sorted(backbones)}, not {config.arch!r}"
            )
        self.config = config
        self.pooling = pooling
        self.backbone = backbones[config.arch](config)
        self.pooler = Pooler(config.d_model, bias=config.bias) if pooling == "first" else None
        self.classifier = SequenceClassifier(
            config.d_model,
            n_classes,
            dropout=config.dropout,
            multiplier=readout_multiplier(config),
        )
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
        n_documents: int | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T), attention_mask (B, T) with 1 for real tokens -> logits (B, n_classes).

        In packed rows, document_ids (R, T) name each token's example (-1: padding) and
        n_documents how many there are: logits (n_documents, n_classes), in example order.
        """
        hidden = self.backbone(input_ids, attention_mask, document_ids=document_ids)  # (B, T, C)
        if document_ids is not None:
            pooled = pool_documents(hidden, document_ids, n_documents, self.pooling)
            return self.classifier(pooled if self.pooler is None else self.pooler(pooled[:, None]))
        if self.pooler is not None:
            return self.classifier(self.pooler(hidden))
        mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).to(
            hidden.dtype
        )  # (B, T)
        if self.pooling == "last":  # right padding: the last real token
            last = mask.sum(1).long().clamp(min=1) - 1  # (B,)
            pooled = hidden[torch.arange(hidden.size(0)), last]  # (B, C)
        else:
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return self.classifier(pooled)


def pool_documents(
    hidden: torch.Tensor, document_ids: torch.Tensor, n: int, pooling: str
) -> torch.Tensor:
    """(R, T, C) hidden states of packed rows -> (n, C), one per example: its first token, its
    last, or the mean of its tokens (`pooling`); document_ids (R, T), -1 for padding."""
    flat, documents = hidden.flatten(0, 1), document_ids.flatten()  # (R T, C), (R T,)
    real = documents >= 0
    tokens, documents = torch.arange(documents.numel(), device=flat.device)[real], documents[real]
    if pooling == "mean":
        sums = flat.new_zeros(n, flat.size(1)).index_add(0, documents, flat[tokens])
        return sums / torch.bincount(documents, minlength=n).clamp(min=1)[:, None].to(flat.dtype)
    first = pooling == "first"
    at = torch.full((n,), flat.size(0) if first else -1, device=flat.device)
    at = at.scatter_reduce(0, documents, tokens, reduce="amin" if first else "amax")
    return flat[at]  # (n, C)


class TokenClassification(ParameterCount, nn.Module):
    """A BERT-style encoder with dropout and one linear layer on every hidden state: one label
    per token (Devlin et al. 2019, sec. 5.3; `BertForTokenClassification`'s layout, with the
    encoder under `backbone` so a masked-LM run's weights load into it).

    Encoders only: labels sit on each word's first piece, which a causal decoder computes before
    it has seen the rest of the word or anything to its right.

    Args:
        config: the encoder's shape; arch must be "encoder".
        n_labels: number of tags.
    """

    def __init__(self, config: ModelConfig, *, n_labels: int) -> None:
        super().__init__()
        if config.arch != "encoder":
            raise ValueError(f"token classification needs arch 'encoder', not {config.arch!r}")
        if n_labels < 1:
            raise ValueError(f"n_labels={n_labels} must be a positive integer")
        self.config = config
        self.backbone = Encoder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = Readout(config.d_model, n_labels, multiplier=readout_multiplier(config))
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T), attention_mask (B, T) with 1 for real tokens -> logits (B, T, n_labels);
        document_ids: (B, T) in packed rows."""
        hidden = self.backbone(input_ids, attention_mask, document_ids=document_ids)  # (B, T, C)
        return self.classifier(self.dropout(hidden))


class SpanExtraction(ParameterCount, nn.Module):
    """Extractive question answering (Devlin et al. 2019, sec. 4.2): a start vector S and an end
    vector E scored against every hidden state, i.e. one linear layer d_model -> 2
    (`BertForQuestionAnswering`'s `qa_outputs`, no dropout), with the encoder under `backbone`
    so a masked-LM run's weights load into it.

    Encoders only: a span's start is chosen knowing the whole context, both sides of it.

    Args:
        config: the encoder's shape; arch must be "encoder" (type_vocab_size 2 for BERT's
            question / context segments).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "encoder":
            raise ValueError(f"span extraction needs arch 'encoder', not {config.arch!r}")
        self.config = config
        self.backbone = Encoder(config)
        self.span_head = Readout(config.d_model, 2, multiplier=readout_multiplier(config))
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> span logits (B, T, 2): [..., 0] start, [..., 1] end.

        attention_mask: (B, T), 1 for real tokens. token_type_ids: (B, T) segment ids.
        document_ids: (B, T) in packed rows.
        """
        hidden = self.backbone(
            input_ids, attention_mask, token_type_ids, document_ids=document_ids
        )  # (B, T, C)
        return self.span_head(hidden)
