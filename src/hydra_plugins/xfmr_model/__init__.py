"""Registers the `model` section's schema (`xfmr.schema`) when Hydra starts: Hydra imports every
module of `hydra_plugins` at start-up, so each composition of xfmr's configs finds it."""

from xfmr.schema import register

register()
