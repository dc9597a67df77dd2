"""A text sample printed when training ends, so a person sees what the model learned."""

from __future__ import annotations

import lightning as L


class TextSample(L.Callback):
    """Prints (and logs to the run's log file) a text sample when training ends, so a person
    sees what the model learned. Skipped for models that are not causal LMs.

    `max_context` crops the context to what the model was trained on (the block size).
    """

    def __init__(
        self,
        *,
        prompt: str = "\n",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 20,
        max_context: int | None = None,
        seed: int = 0,
    ) -> None:
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.max_context = max_context
        self.seed = seed
        self.tokenizer = None  # set by the run before fitting

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A sharded model (trainer=fsdp) runs a forward on every rank together: each samples
        # the same text (one seed), rank 0 prints it.
        sharded = getattr(pl_module, "device_mesh", None) is not None
        if (
            self.tokenizer is None
            or (trainer.global_rank != 0 and not sharded)
            or getattr(getattr(pl_module.model, "config", None), "arch", None)
            not in ("decoder", "rnn")
            or not hasattr(pl_module.model, "lm_head")  # a language model, not a classifier
        ):
            return
        import logging

        from xfmr.generation import GenerationConfig, sample_text

        ids = self.tokenizer.encode(self.prompt) or [0]
        config = GenerationConfig(  # temperature 0: the most likely token every step
            strategy="sample" if self.temperature > 0 else "greedy",
            temperature=self.temperature if self.temperature > 0 else 1.0,
            top_k=self.top_k,
            seed=self.seed,
        )
        out = sample_text(
            pl_module.model,
            ids,
            max_new_tokens=self.max_new_tokens,
            config=config,
            max_context=self.max_context,
            vocab_size=self.tokenizer.vocab_size,
        )
        if trainer.global_rank == 0:
            text = self.tokenizer.decode(out)
            logging.getLogger("xfmr").info("sample after step %d:\n%s", trainer.global_step, text)
