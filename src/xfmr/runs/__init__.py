"""Using finished runs: everything that reads a run directory after training.

loading.py     a run's config, tokenizer, objective and the weights of one checkpoint
inference.py   prompts and sources in, text out (xfmr-generate)
evaluation.py  loss, metrics and BLEU on a split (xfmr-eval)
averaging.py   the mean of a run's last checkpoints (xfmr-average)
attention.py   attention weights of one input, drawn as maps (xfmr-attention)
export.py      a checkpoint's weights as safetensors (xfmr-export)
compare/       many runs and sweeps side by side (xfmr-compare)
"""
