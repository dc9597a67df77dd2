"""The order of training examples, and the random numbers of each training batch, as pure
functions of (seed, epoch, position), so that memory does not grow with the corpus and a run
killed anywhere resumes on exactly the batch it would have trained next.

torch's RandomSampler keeps a Python list of every index (about 36 bytes an offset: 9 GB for a
corpus of 250M tokens read at every offset) and can only resume by replaying the epoch;
torchdata's StatefulDataLoader resumes, but fast-forwards that same sampler. Here the epoch's
permutation is computed index by index (`LazyPermutation`), and the training loader records how
many batches of the epoch it has handed out (`state_dict`, which Lightning stores in every
checkpoint). Each batch's indices travel with a key made from that place (`KeyedBatch`), and
torch, numpy and Python's generators are seeded from it in whichever process reads and
collates the batch, a loader worker or the training process; the batch then carries a key
derived from it (`STEP_KEY`), from which the training step reseeds them just before the batch's
forward (`seed_step`). Masking, sentence-pair draws and dropout then depend only on the batch's
place in the run, not on how many workers made it.

Validation batches are drawn the same way from (seed, the batch's dataset indices)
(`ValidationReads`, `SeededCollate`): the same masks at every validation, with any number of
workers, and the training process's generators left as they were.

Training loaders hand out a gradient-accumulation window at a time (`counted_windows`): a list
of the micro-batches of one optimizer step, so that each of Lightning's training batches is one
optimizer step.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Sequence, Sized
from itertools import islice
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, default_collate
from torch.utils.data.distributed import DistributedSampler

_ROUNDS = 6  # Feistel rounds: 4 already make a strong pseudo-random permutation (Luby-Rackoff)
_CHUNK = 8192  # indices computed at a time
_M64 = (1 << 64) - 1
_VALIDATION = 0x76616C69646174  # "validat": validation keys, apart from training ones

# Batch keys: the counts of what each loss term of the objective averages over, in this batch
# and in all batches of its gradient-accumulation window (on this process); and the 64-bit key
# (a Python int) of the random numbers the training step draws on this batch (dropout).
COUNTS = "counts"
WINDOW_COUNTS = "window_counts"
STEP_KEY = "step_key"


def _splitmix64(value: int) -> int:
    """One step of SplitMix64 (Steele et al. 2014): a well-mixed 64-bit key from any integer."""
    z = (value + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _mix(x: np.ndarray, key: np.uint64) -> np.ndarray:
    """SplitMix64's finaliser over `x + key`, elementwise (uint64 arithmetic wraps)."""
    z = (x + key) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class LazyPermutation:
    """A pseudo-random permutation of range(n), computed for any positions without building it:
    a balanced Feistel network on the smallest even number of bits that holds n, with cycle
    walking back into range (Black and Rogaway 2002). O(1) memory; each index costs about
    `_ROUNDS` hashes (times at most 4 walks, since the domain is under 4n)."""

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError(f"a permutation of {n} items")
        self.n = n
        half = max(1, ((n - 1).bit_length() + 1) // 2)
        self.shift = np.uint64(half)
        self.mask = np.uint64((1 << half) - 1)
        key = _splitmix64(seed & _M64)
        self.keys = []
        for _ in range(_ROUNDS):
            key = _splitmix64(key)
            self.keys.append(np.uint64(key))

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.shift, x & self.mask
        for key in self.keys:
            left, right = right, left ^ (_mix(right, key) & self.mask)
        return (left << self.shift) | right

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        out = self._feistel(np.asarray(positions, dtype=np.uint64))
        outside = out >= self.n
        while outside.any():  # cycle walking: a bijection on [0, 4^half) restricted to [0, n)
            out[outside] = self._feistel(out[outside])
            outside = out >= self.n
        return out.astype(np.int64)


def epoch_seed(seed: int, epoch: int) -> int:
    return _splitmix64(_splitmix64(seed & _M64) ^ epoch)


class EpochSampler(DistributedSampler):
    """Each epoch a fresh permutation of the dataset (`LazyPermutation` keyed by seed and
    epoch), dealt out round-robin to the DDP ranks, the tail that does not fill every rank
    dropped. A DistributedSampler, so Lightning passes it the epoch and leaves it in place.

    `start` skips the first examples of this rank's share once (a resumed epoch)."""

    def __init__(self, dataset: Sized, *, seed: int) -> None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        super().__init__(
            dataset,  # type: ignore[arg-type]
            num_replicas=torch.distributed.get_world_size() if distributed else 1,
            rank=torch.distributed.get_rank() if distributed else 0,
            shuffle=True,
            seed=seed,
            drop_last=True,
        )
        self.start = 0

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)  # type: ignore[arg-type]
        permutation = LazyPermutation(n, epoch_seed(self.seed, self.epoch))
        start, self.start = self.start, 0
        for first in range(start, self.num_samples, _CHUNK):
            mine = np.arange(first, min(first + _CHUNK, self.num_samples), dtype=np.int64)
            yield from permutation[mine * self.num_replicas + self.rank].tolist()

    def __len__(self) -> int:
        return self.num_samples


def batch_key(seed: int, epoch: int, batch: int, rank: int) -> int:
    """The 64-bit key of one training batch's random numbers."""
    return _splitmix64(epoch_seed(seed, epoch) ^ _splitmix64((batch << 16) | rank))


def seed_generators(key: int) -> None:
    """Seed torch, numpy and Python's generators from a 64-bit key."""
    seed_torch(key & ((1 << 63) - 1))
    np.random.seed(key & 0xFFFFFFFF)
    random.seed(key)


def seed_step(batch: dict[str, Any]) -> None:
    """Seed the generators for the training step's draws on `batch` (its dropout) from the key
    the training loader gave it, taken out of the batch (an int the model is not to see);
    a batch without one (a stream's) leaves them as they are."""
    key = batch.pop(STEP_KEY, None)
    if key is not None:
        seed_generators(key)


def seed_torch(seed: int) -> None:
    """What `torch.manual_seed` does to the generators a run draws from: the CPU's, and a CUDA
    or MPS device's once in use. torch.manual_seed also queues a seed for every other device
    type torch was built for, formatting the Python stack for each: 0.3 to 0.9 ms a call on a
    CPU, twice a training step, against microseconds here."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


class KeyedBatch(NamedTuple):
    """A batch's dataset indices, with the key its random numbers are drawn from."""

    key: int
    indices: list[int]


class KeyedBatches:
    """The batches of an `EpochSampler`'s order, each a `KeyedBatch` keyed by (seed, epoch,
    position in the epoch, rank); a resumed epoch (`order.start`) counts on from its place."""

    def __init__(self, order: EpochSampler, *, batch_size: int, drop_last: bool) -> None:
        self.order = order
        self.batches = BatchSampler(order, batch_size, drop_last)

    def __iter__(self) -> Iterator[KeyedBatch]:
        # Read before iterating the order, which consumes `start`.
        first = self.order.start // self.batches.batch_size
        seed, epoch, rank = self.order.seed, self.order.epoch, self.order.rank
        for position, indices in enumerate(self.batches, start=first):
            yield KeyedBatch(batch_key(seed, epoch, position, rank), indices)

    def __len__(self) -> int:
        return len(self.batches)


class SeededReads(Dataset):
    """`dataset`, read a batch at a time (the DataLoader's `__getitems__`) with the generators
    seeded from the batch's key first: the collate function, which the loader calls next in the
    same process, draws the same numbers in a worker as in the training process."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: KeyedBatch) -> list[Any]:
        seed_generators(batch.key)
        return [self.dataset[index] for index in batch.indices]


def run_seed() -> int:
    """The seed the run gave `L.seed_everything` (0 outside a run)."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def validation_key(seed: int, indices: Sequence[int]) -> int:
    """The 64-bit key of a validation batch's random numbers: a function of the run's seed and
    the batch's dataset indices alone (not of the process, worker or validation that makes it),
    apart from every training batch's by `_VALIDATION`."""
    key = _splitmix64((seed & _M64) ^ _VALIDATION)
    for index in indices:
        key = _splitmix64(key ^ (int(index) & _M64))
    return key


class KeyedExamples(list):
    """A batch's examples, read by `ValidationReads`, with the key of its random numbers."""

    key: int


class ValidationReads(Dataset):
    """`dataset`, read a batch at a time (the DataLoader's `__getitems__`, whichever sampler
    Lightning gives the loader) into `KeyedExamples` keyed by `validation_key`, for a
    `SeededCollate` to draw the batch's masks from."""

    def __init__(self, dataset: Dataset | Sequence[Any], *, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> KeyedExamples:
        examples = KeyedExamples(self.dataset[index] for index in indices)
        examples.key = validation_key(self.seed, indices)
        return examples


class SeededCollate:
    """`collate` with the host's generators (torch's CPU one, numpy's, Python's) seeded from
    the examples' key (`KeyedExamples`) and put back afterwards: a validation batch's masks,
    spans and truncations are the same in a loader worker as in the training process, at every
    validation, and the training process's own random state is left as it was."""

    def __init__(self, collate: Callable[[list[Any]], Any] | None) -> None:
        self.collate = collate or default_collate

    def __call__(self, examples: list[Any]) -> Any:
        key = getattr(examples, "key", None)
        if key is None:
            return self.collate(examples)
        kept = torch.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            torch.default_generator.manual_seed(key & ((1 << 63) - 1))
            np.random.seed(key & 0xFFFFFFFF)
            random.seed(key)
            return self.collate(list(examples))
        finally:
            torch.set_rng_state(kept[0])
            np.random.set_state(kept[1])
            random.setstate(kept[2])


class CountedCollate:
    """`collate`, then the batch's `counts(batch)` (a count per loss term) added as `COUNTS`:
    made where the batch is collated, on the host, so that a window's totals are known before
    the device computes anything. A class, not a closure, so loader workers can pickle it."""

    def __init__(
        self,
        collate: Callable[[list[Any]], dict[str, Any]],
        counts: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
    ) -> None:
        self.collate = collate
        self.counts = counts

    def __call__(self, examples: list[Any]) -> dict[str, Any]:
        batch = self.collate(examples)
        batch[COUNTS] = self.counts(batch)
        return batch


def counted_windows(batches: Iterator[Any], *, position: int, size: int) -> Iterator[list[Any]]:
    """`batches`, from `position` in the epoch, a window at a time: the lists of the epoch's
    batches [0, size), [size, 2 * size), ... on which gradient accumulation takes one optimizer
    step each (the one holding `position` starts there; the last may be short). Each batch
    that carries `COUNTS` gets the window's per-term totals as `WINDOW_COUNTS`."""
    while True:
        end = (position // size + 1) * size
        window = list(islice(batches, end - position))
        if not window:
            return
        counted = [b[COUNTS] for b in window if isinstance(b, dict) and COUNTS in b]
        if len(counted) == len(window):
            totals = {term: sum(c[term] for c in counted) for term in counted[0]}
            for batch in window:
                batch[WINDOW_COUNTS] = dict(totals)
        yield window
        position += len(window)


def windows_of(batches: int, size: int) -> int:
    """The windows of `size` that `batches` batches make, the last perhaps short."""
    return -(-batches // size)


class WindowedLoader(DataLoader):
    """A DataLoader that hands out its batches a gradient-accumulation window at a time, each
    batch with its window's counts (`counted_windows`), for training batches that do not come
    from a `TrainingLoader` (a stream, which starts each epoch from its beginning)."""

    def __init__(self, *args: Any, accumulate: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accumulate = accumulate

    def __iter__(self) -> Iterator[list[Any]]:  # type: ignore[override]
        return counted_windows(super().__iter__(), position=0, size=self.accumulate)

    def __len__(self) -> int:
        return windows_of(super().__len__(), self.accumulate)


class TrainingLoader(DataLoader):
    """Shuffled training batches in `EpochSampler` order that Lightning can checkpoint and
    restore mid-epoch (its `state_dict` / `load_state_dict` interface): a resumed run continues
    on the next batch, with the same random numbers, instead of replaying the epoch.

    Each batch is read and collated with torch, numpy and Python's generators seeded from
    (seed, epoch, batch, rank), in a worker process or this one alike, so the objective's
    masking and NSP's pair draws are the same in a resumed run and with any `num_workers`.
    Each batch also carries a key derived from the same place (`STEP_KEY`), from which the
    training step seeds them again for its dropout (`seed_step`).

    Batches are handed out `accumulate` at a time, each list one optimizer step's window of
    gradient accumulation (`counted_windows`), each batch with its window's counts; `len()` is
    the epoch's number of windows. The place kept for a resume counts batches, those of the
    windows handed out, not those read ahead.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any] | None,
        drop_last: bool = True,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int | None = None,
        accumulate: int = 1,
    ) -> None:
        self.accumulate = accumulate
        self.seed = run_seed() if seed is None else seed
        # `sampler` stays this DistributedSampler, so Lightning leaves the loader as it is.
        self.order = EpochSampler(dataset, seed=self.seed)  # type: ignore[arg-type]
        super().__init__(
            SeededReads(dataset),
            batch_size=batch_size,
            sampler=self.order,
            drop_last=drop_last,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            persistent_workers=num_workers > 0,
        )
        self.keyed_batches = KeyedBatches(self.order, batch_size=batch_size, drop_last=drop_last)
        self.position = 0  # batches handed out in this epoch
        self._restored = False  # position came from a checkpoint: the next epoch goes on from it

    @property
    def _index_sampler(self) -> KeyedBatches:  # type: ignore[override]
        # What torch's loader iterators draw each batch's indices from (`batch_sampler`
        # otherwise): the same batches, with the key that goes with them to a worker.
        return self.keyed_batches

    def __iter__(self) -> Iterator[list[Any]]:  # type: ignore[override]
        # The body runs at the first window, after Lightning has set the epoch and restored state.
        if not self._restored or self.position >= len(self.keyed_batches):
            self.position = 0
        self._restored = False
        self.order.start = self.position * self.batch_size  # type: ignore[operator]
        windows = counted_windows(super().__iter__(), position=self.position, size=self.accumulate)
        for window in windows:
            for batch in window:
                key = batch_key(self.seed, self.order.epoch, self.position, self.order.rank)
                if isinstance(batch, dict):  # the step's numbers, apart from the collate's
                    batch[STEP_KEY] = _splitmix64(key)
                self.position += 1
            yield window

    def __len__(self) -> int:
        return windows_of(len(self.keyed_batches), self.accumulate)

    def state_dict(self) -> dict[str, int]:
        # The epoch and seed come back through Lightning's loop state and the run's config.
        return {"position": self.position}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.position = int(state_dict.get("position", 0))
        self._restored = True
