"""Moving models between xfmr and other libraries. `xfmr.interop.hf`: Hugging Face transformers
(imported only when a checkpoint is read from disk)."""

from xfmr.interop.hf import config_from_hf, from_hf, load_into, load_pretrained

__all__ = ["config_from_hf", "from_hf", "load_into", "load_pretrained"]
