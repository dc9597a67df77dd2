"""A Hugging Face dataset as a data source: a hub dataset by name, or local files through a
builder ("json", "csv", "text", "parquet"), and the splits that train and validate on it.
`datasets` is imported only when the data is loaded, so config checks and `--help` never pay
for it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from xfmr.data.settings import HF_PATH_CHOICES
from xfmr.errors import UserError

# Held-out rows for labelled data and pairs are drawn with a fixed seed: hub datasets are often
# sorted by label (IMDb: all negative reviews, then all positive), so a tail would be one class.
SPLIT_SEED = 0


@dataclass
class HFSource:
    """A Hugging Face dataset and the splits that train and validate on it.

    Args:
        path: a hub name ("stanfordnlp/imdb"), a local dataset directory, or a builder for
            local files ("json", "csv", "text", "parquet") together with `data_files`.
        name: the dataset's configuration (e.g. "sst2" of "nyu-mll/glue"), if it has several.
        data_files: a builder's files: a path or glob, a list, or {split: path(s)}.
        revision: a hub branch, tag or commit that pins the data.
        train_split: the split to train on.
        val_split: the split to validate on; None holds out `val_fraction` of `train_split`.
        val_fraction: the held-out share of `train_split` when `val_split` is None.
        cache_dir: where `datasets` keeps prepared data; None: its own (HF_DATASETS_CACHE).
        shuffle_held_out: draw the held-out rows at random (seeded) rather than the tail.
        streaming: read rows as they are needed (`datasets.IterableDataset`s), never a whole
            split in memory; then the first `val_rows` rows of `train_split` may validate.
        val_rows: with `streaming`, how many rows at the head of `train_split` validate (the
            rest train) when `val_split` is None.
    """

    path: str
    name: str | None = None
    data_files: Any = None
    revision: str | None = None
    train_split: str = "train"
    val_split: str | None = "validation"
    val_fraction: float | None = None
    cache_dir: str | None = None
    shuffle_held_out: bool = False
    streaming: bool = False
    val_rows: int | None = None
    _splits: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _row_numbers: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError(f"data.path is not set: {HF_PATH_CHOICES}")
        if self.streaming:
            self._check_streamed_validation()
        elif self.val_rows is not None:
            raise UserError(
                f"data.val_rows={self.val_rows} is for data.streaming=true; without streaming "
                "hold out a share of the training split with data.val_fraction"
            )
        elif (self.val_split is None) == (self.val_fraction is None):
            raise UserError(
                f"data.val_split={self.val_split!r} and data.val_fraction={self.val_fraction!r}: "
                "give exactly one (a split name, or null and a fraction of the training split)"
            )
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"data.val_fraction={self.val_fraction} must lie in (0, 1)")
        if OmegaConf.is_config(self.data_files):  # datasets wants plain lists and dicts
            self.data_files = OmegaConf.to_container(self.data_files, resolve=True)

    def _check_streamed_validation(self) -> None:
        if self.val_fraction is not None:
            raise UserError(
                f"data.val_fraction={self.val_fraction} needs the whole split in memory; with "
                "data.streaming=true give data.val_rows=N (the first N rows of data.train_split "
                "validate) or data.val_split=NAME"
            )
        if (self.val_split is None) == (self.val_rows is None):
            raise UserError(
                f"data.val_split={self.val_split!r} and data.val_rows={self.val_rows!r}: with "
                "data.streaming=true give exactly one (a split name, or null and a number of rows)"
            )
        if self.val_rows is not None and not (isinstance(self.val_rows, int) and self.val_rows > 0):
            raise UserError(f"data.val_rows={self.val_rows!r} must be a positive number of rows")

    def describe(self, split: str) -> str:
        return f"{self.path}:{split}"

    def split_names(self) -> tuple[str, str]:
        """How the training and validation rows are named in messages and bad-row reports."""
        if self.val_split is not None:
            return self.describe(self.train_split), self.describe(self.val_split)
        if self.val_rows is not None:
            return (
                self.describe(f"{self.train_split} (after row {self.val_rows})"),
                self.describe(f"{self.train_split} (first {self.val_rows} rows)"),
            )
        held_out = f"{self.train_split} (held-out {self.val_fraction:.0%})"
        return self.describe(f"{self.train_split} (rest)"), self.describe(held_out)

    def splits(self) -> dict[str, Any]:
        """{name from `split_names`: `datasets.Dataset`, or with `streaming` an unshuffled
        `datasets.IterableDataset`}, loaded once."""
        if self._splits is None:
            loaded = self._load()
            train = self._split(loaded, self.train_split, "train_split")
            if self.val_split is not None:
                parts = (train, self._split(loaded, self.val_split, "val_split"))
            elif self.val_rows is not None:  # streaming: the head validates, read afresh each time
                parts = (train.skip(self.val_rows), train.take(self.val_rows))
            else:
                orders = _hold_out(len(train), self.val_fraction, shuffle=self.shuffle_held_out)
                parts = tuple(train.select(order) for order in orders)
                self._row_numbers = dict(zip(self.split_names(), orders, strict=True))
            self._splits = dict(zip(self.split_names(), parts, strict=True))
        return self._splits

    def row_number(self, split: str, index: int) -> int:
        """Where row `index` of `split` (a name from `split_names`) sits in its dataset split."""
        numbers = self._row_numbers.get(split)
        return numbers[index] if numbers else index

    def _load(self) -> Any:
        try:
            import datasets
        except ImportError:
            raise UserError(
                "data=hf needs the Hugging Face `datasets` package: pip install 'xfmr[hf]'"
            ) from None
        try:
            return datasets.load_dataset(
                self.path,
                name=self.name,
                data_files=self.data_files,
                revision=self.revision,
                cache_dir=self.cache_dir,
                streaming=self.streaming,
            )
        except (OSError, ValueError, datasets.exceptions.DatasetsError) as e:
            raise UserError(
                f"data.path={self.path!r} (data.name={self.name!r}, "
                f"data.data_files={self.data_files!r}) could not be loaded: {e}"
            ) from None

    def _split(self, loaded: Any, split: str, key: str) -> Any:
        if split not in loaded:
            held_out = "data.val_rows=1000" if self.streaming else "data.val_fraction=0.1"
            hint = "" if key == "train_split" else f" (or data.val_split=null {held_out})"
            raise UserError(
                f"data.{key}={split!r} is not a split of data.path={self.path!r}; "
                f"its splits: {list(loaded)}{hint}"
            )
        return loaded[split]


def _hold_out(n_rows: int, fraction: float, *, shuffle: bool) -> tuple[list[int], list[int]]:
    """(training rows, held-out rows) of a split of `n_rows`."""
    order = list(range(n_rows))
    if shuffle:
        random.Random(SPLIT_SEED).shuffle(order)
    cut = round(len(order) * (1.0 - fraction))
    if not 0 < cut < len(order):
        raise UserError(
            f"data.val_fraction={fraction} of {len(order)} rows leaves "
            f"{cut} to train and {len(order) - cut} to validate: both need at least one row"
        )
    return order[:cut], order[cut:]
