"""Downstream evaluation through lm-evaluation-harness (lm-eval, the optional `xfmr[eval]` extra).

    checks.py    before anything loads: lm-eval installed (else which extra), names, settings
    lm_model.py  `XfmrLM`: lm-eval's `LM` over a loaded run, without conversion
    generating.py `generate_until`'s settings and decoding, through xfmr's generation
    harness.py   run tasks on a run: lm_eval.json beside results.json, the scores in it
    in_training.py `callbacks.lm_eval`: tasks scored on the model being trained, every N steps

Above `xfmr.runs` (it reads a finished run as xfmr-eval and xfmr-generate do), below
`xfmr.api`; training's config names the callback by `_target_` (training does not import
this). Nothing here imports lm-eval until a task runs.
"""
