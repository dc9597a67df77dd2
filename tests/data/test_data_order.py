"""The training order: a permutation per epoch computed index by index, dealt to DDP ranks,
resumable at any batch, with memory that does not grow with the dataset; and each batch's
random numbers, the same whether the batch is made in a worker process or the training one.
A training loader hands out windows of batches (one optimizer step's), of one batch here."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest
import torch

from xfmr.data.order import EpochSampler, LazyPermutation, TrainingLoader, seed_step
from xfmr.objectives.mlm import mask_tokens


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 65537])
def test_a_lazy_permutation_is_a_permutation(n: int):
    values = LazyPermutation(n, seed=7)[np.arange(n)]
    assert sorted(values.tolist()) == list(range(n))


def test_every_place_is_equally_likely():
    # Where item 0 lands in a permutation of 10, over 5000 seeds: a chi-square test at 0.1%.
    places = [int(np.argmax(LazyPermutation(10, seed)[np.arange(10)] == 0)) for seed in range(5000)]
    counts = np.bincount(places, minlength=10)
    chi2 = float(((counts - 500) ** 2 / 500).sum())
    assert chi2 < 27.88, counts  # 9 degrees of freedom


def test_epochs_and_seeds_give_different_orders():
    data = range(100)
    first = EpochSampler(data, seed=1)
    order0 = list(first)
    first.set_epoch(1)
    assert list(first) != order0
    assert list(EpochSampler(data, seed=2)) != order0
    assert list(EpochSampler(data, seed=1)) == order0


def test_ranks_share_an_epoch_without_overlap():
    data = range(103)
    samplers = [EpochSampler(data, seed=3) for _ in range(2)]
    for rank, sampler in enumerate(samplers):
        sampler.num_replicas, sampler.rank = 2, rank
        sampler.num_samples = len(data) // 2
    a, b = (list(s) for s in samplers)
    assert len(a) == len(b) == 51 and not set(a) & set(b)


def test_a_loader_restored_mid_epoch_goes_on_with_the_same_batches_and_random_numbers():
    def collate(items):
        return torch.tensor(items), torch.rand(2)  # the random numbers a batch's masking draws

    def loader():
        return TrainingLoader(list(range(40)), batch_size=4, collate_fn=collate, seed=5)

    whole = [batch for (batch,) in loader()]
    first = loader()
    windows = iter(first)
    for _ in range(3):
        next(windows)
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [batch for (batch,) in resumed]
    assert len(rest) == len(whole) - 3
    for (ids, noise), (ids_ref, noise_ref) in zip(rest, whole[3:], strict=True):
        assert torch.equal(ids, ids_ref) and torch.equal(noise, noise_ref)
    assert len(list(resumed)) == len(whole)  # the next epoch starts at its beginning


def test_memory_does_not_grow_with_the_dataset():
    # An epoch over a billion windows: its first 20,000 indices cost what they cost over 100,000.
    def peak(n: int) -> int:
        sampler = EpochSampler(range(n), seed=0)
        tracemalloc.start()
        iterator = iter(sampler)
        for _ in range(20000):
            next(iterator)
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size

    assert peak(1_000_000_000) < peak(100_000) + 1_000_000


def mlm_collate(blocks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """BERT's masking, and a draw from numpy's and Python's generators: all three must be
    seeded wherever the batch is collated. At module level, so that workers can load it."""
    ids = torch.stack(blocks)
    corrupted, labels = mask_tokens(ids, mask_id=1, vocab_size=32, special_ids=torch.tensor([0, 1]))
    draws = torch.tensor([np.random.rand(), random.random()], dtype=torch.float64)
    return {"input_ids": corrupted, "labels": labels, "draws": draws}


def mlm_loader(num_workers: int) -> TrainingLoader:
    blocks = [torch.arange(i, i + 16) % 30 + 2 for i in range(48)]
    return TrainingLoader(
        blocks, batch_size=4, collate_fn=mlm_collate, num_workers=num_workers, seed=11
    )


def batches_and_step_draws(windows) -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Each batch, with the numbers the training step draws on it (its dropout), the
    generators seeded from the batch's key as the step seeds them."""
    return [(batch, step_draws(batch)) for (batch,) in windows]


def step_draws(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    seed_step(batch)
    return torch.tensor([torch.rand(()).item(), np.random.rand(), random.random()])


def assert_same_batches(got, expected) -> None:
    assert len(got) == len(expected)
    for (batch, step), (batch_ref, step_ref) in zip(got, expected, strict=True):
        assert batch.keys() == batch_ref.keys()
        assert all(torch.equal(batch[key], batch_ref[key]) for key in batch)
        assert torch.equal(step, step_ref)


def test_masks_and_step_numbers_do_not_depend_on_the_number_of_workers():
    in_process = batches_and_step_draws(mlm_loader(0))
    in_workers = batches_and_step_draws(mlm_loader(2))
    assert_same_batches(in_workers, in_process)
    masks = [batch["labels"] for batch, _ in in_process]
    assert not all(torch.equal(masks[0], mask) for mask in masks[1:])  # masks are drawn
    # The training step's numbers are not the collate's over again.
    assert all(not torch.equal(step[1:], batch["draws"]) for batch, step in in_process)


def test_a_loader_with_workers_restored_mid_epoch_goes_on_with_the_same_batches():
    whole = batches_and_step_draws(mlm_loader(0))
    first = mlm_loader(2)
    windows = iter(first)
    for _ in range(5):  # the workers have made batches beyond these; they are not handed out
        next(windows)
    state = first.state_dict()
    del windows, first
    resumed = mlm_loader(2)
    resumed.load_state_dict(state)
    assert_same_batches(batches_and_step_draws(resumed), whole[5:])
    assert_same_batches(batches_and_step_draws(resumed), whole)  # the next epoch from its start
