"""A run's parts, built in one place for training and for using a finished run.

build.py      the plan (where each part comes from) and the parts built from it
tokenizer.py  the run's tokenizer: its own, init_from's, or fitted (or cached) on the data
labels.py     the label set of classification and tagging runs (labels.json)
transfer.py   init_from: earlier weights (an xfmr run, an export, Hugging Face) into a model
"""
