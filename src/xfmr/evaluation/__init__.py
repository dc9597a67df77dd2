"""Downstream evaluation through lm-evaluation-harness (lm-eval, the optional `xfmr[eval]` extra).

    checks.py    before anything loads: lm-eval installed (else which extra), names, settings
    lm_model.py  `XfmrLM`: lm-eval's `LM` over a loaded run, without conversion
    generating.py `generate_until`'s settings and decoding, through xfmr's generation
    harness.py   run tasks on a run: lm_eval.json beside results.json, the scores in it

Above `xfmr.runs` (it reads a finished run as xfmr-eval and xfmr-generate do), below
`xfmr.api`. Nothing here imports lm-eval until a task runs.
"""
