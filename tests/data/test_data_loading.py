"""How batches reach the device: pinned for a CUDA device and not for a CPU; data.num_workers=auto
chosen for the device (none on a CPU, a few on a GPU), a number kept as given, anything else one
UserError; Lightning's advice to raise num_workers replaced by one line when xfmr chose it."""

from __future__ import annotations

import inspect
import logging
import warnings
from types import SimpleNamespace

import hydra.utils
import lightning as L
import pytest
import torch
from lightning.pytorch.trainer.connectors.data_connector import _worker_check
from omegaconf import OmegaConf

import xfmr.data.loading as loading
from helpers import ROOT
from xfmr.data.base import ExamplesDataModule
from xfmr.data.config import MAX_AUTO_WORKERS, NUMBERS, auto_workers
from xfmr.data.hf_stream import HFStreamingDataModule, StreamedExamples
from xfmr.data.loading import device_loading
from xfmr.data.order import TrainingLoader
from xfmr.data.settings import ChosenWorkers
from xfmr.data.text import TextCorpusDataModule
from xfmr.errors import UserError
from xfmr.ranges import check_numbers

# The tests give a loader more workers than this machine's CPUs (built, never started).
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
CONF_DATA = ROOT / "conf" / "data"
CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def _trainer(device: torch.device, num_devices: int = 1) -> SimpleNamespace:
    """What the data modules read of their trainer: where it trains, on how many devices."""
    return SimpleNamespace(strategy=SimpleNamespace(root_device=device), num_devices=num_devices)


def _examples(**settings) -> ExamplesDataModule:
    module = ExamplesDataModule(batch_size=2, **settings)
    module.train_set = module.val_set = [torch.tensor([i]) for i in range(8)]
    module.collate_fn = torch.stack
    return module


def _text(**settings) -> TextCorpusDataModule:
    module = TextCorpusDataModule(block_size=4, batch_size=2, **settings)
    module.train_ids = module.val_ids = torch.arange(41)
    module.collate_fn = torch.stack
    return module


def _loaders(module: L.LightningDataModule, trainer) -> tuple:
    module.trainer = trainer
    return module.train_dataloader(), module.val_dataloader()


@pytest.mark.parametrize(
    ("device", "cpus", "devices", "workers"),
    [
        (CPU, 16, 1, 0),  # the cores train the model
        (torch.device("mps"), 16, 1, 0),
        (CUDA, 16, 1, MAX_AUTO_WORKERS),  # 15 would be free: capped
        (CUDA, 16, 4, 3),  # 4 CPUs per device, one of them the training process's
        (CUDA, 8, 4, 1),
        (CUDA, 4, 4, 0),  # one CPU per device: the training process's own
        (CUDA, 1, 1, 0),
    ],
)
def test_auto_workers_share_this_process_s_cpus_among_its_devices(device, cpus, devices, workers):
    assert auto_workers(device.type, cpus=cpus, local_world_size=devices) == workers


@pytest.mark.parametrize("module", [_examples, _text], ids=["examples", "text"])
def test_batches_for_a_cuda_device_are_pinned_and_for_a_cpu_are_not(module, monkeypatch):
    monkeypatch.setattr(loading, "cpu_cores", lambda: 16)
    train, val = _loaders(module(), _trainer(CUDA, num_devices=4))
    assert isinstance(train, TrainingLoader)
    assert (train.pin_memory, val.pin_memory) == (True, True)
    assert (train.num_workers, val.num_workers) == (3, 3)
    train, val = _loaders(module(), _trainer(CPU))
    assert (train.pin_memory, val.pin_memory) == (False, False)
    assert (train.num_workers, val.num_workers) == (0, 0)


def test_a_number_of_workers_is_kept_as_given(monkeypatch):
    monkeypatch.setattr(loading, "cpu_cores", lambda: 16)
    for device in (CPU, CUDA):
        train, val = _loaders(_examples(num_workers=2), _trainer(device))
        assert (train.num_workers, val.num_workers) == (2, 2)
        assert train.pin_memory is (device.type == "cuda")


def test_without_a_trainer_batches_are_made_in_this_process():
    train, val = _loaders(_text(), None)  # xfmr-eval reads the validation loader on its own
    assert (train.num_workers, val.num_workers, val.pin_memory) == (0, 0, False)


def test_a_stream_gets_no_more_workers_than_it_has_shards(monkeypatch):
    monkeypatch.setattr(loading, "cpu_cores", lambda: 16)
    for given in ("auto", ChosenWorkers(MAX_AUTO_WORKERS)):  # chosen now, or when read
        module = HFStreamingDataModule(source=None, kind="text", fields={}, num_workers=given)  # type: ignore[arg-type]
        module.collate_fn = list
        module.trainer = _trainer(CUDA)
        for shards, workers in ((2, 2), (64, MAX_AUTO_WORKERS)):
            stream = StreamedExamples(SimpleNamespace(num_shards=shards), iter, empty="")
            loader = module._loader(stream, training=True)
            assert (loader.num_workers, loader.pin_memory) == (workers, True)


@pytest.mark.parametrize("bad", [-1, "many", 1.5, None])
def test_a_bad_num_workers_is_one_user_error_naming_the_key_and_what_is_valid(bad):
    says = f"data.num_workers={bad!r} is not valid: use an integer >= 0, or auto"
    with pytest.raises(UserError) as built:
        _text(num_workers=bad)
    assert str(built.value).startswith(says)
    with pytest.raises(UserError) as checked:  # the config check, before anything is built
        check_numbers("data", {"num_workers": bad}, NUMBERS)
    assert str(checked.value) == str(built.value)
    check_numbers("data", {"num_workers": "auto"}, NUMBERS)
    check_numbers("data", {"num_workers": 3}, NUMBERS)


def _lightning_advice(trainer: L.Trainer, module: L.LightningDataModule) -> list[str]:
    """The warnings Lightning's worker check gives about the module's two loaders."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train, val = _loaders(module, trainer)
        _worker_check(trainer, train, "train_dataloader")
        _worker_check(trainer, val, "val_dataloader")
    return [str(w.message) for w in caught if "does not have many workers" in str(w.message)]


def test_lightning_s_advice_gives_way_to_one_line_when_xfmr_chose(monkeypatch, caplog):
    # Lightning advises more workers when a machine has CPUs to spare: give it 8.
    monkeypatch.setattr("lightning.fabric.utilities.data._num_cpus_available", lambda: 8)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    with caplog.at_level(logging.INFO, logger="xfmr"):
        assert _lightning_advice(trainer, _text()) == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data: ")]
    assert lines == [
        "data: batches made in the training process (data.num_workers=auto: 0 on a CPU, "
        "whose cores train the model)"
    ]
    caplog.clear()
    # The run's config chose it (`auto` read as 0 for this CPU): the loaders say so as well.
    with caplog.at_level(logging.INFO, logger="xfmr"):
        assert _lightning_advice(trainer, _text(num_workers=ChosenWorkers(0))) == []
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("data: ")] == lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        advice = _lightning_advice(trainer, _text(num_workers=0))  # the user's own number
    assert [line.split(" does")[0] for line in advice] == [
        "The 'train_dataloader'",
        "The 'val_dataloader'",
    ]
    assert not [r for r in caplog.records if r.getMessage().startswith("data: ")]


def test_the_line_names_the_workers_and_the_device(monkeypatch, caplog):
    monkeypatch.setattr(loading, "cpu_cores", lambda: 16)
    with caplog.at_level(logging.INFO, logger="xfmr"):
        device_loading(_trainer(CUDA, num_devices=4), "auto", training=True)
    assert caplog.messages == [
        "data: 3 loader workers on cuda:0 (data.num_workers=auto: 16 CPUs for 4 device(s), "
        "less one for the training process, at most 4)"
    ]


def test_every_data_config_and_its_module_default_to_auto():
    files = [f for f in sorted(CONF_DATA.glob("*.yaml")) if "num_workers" in f.read_text()]
    assert len(files) >= 9
    for file in files:
        data = OmegaConf.load(file)
        assert data.num_workers == "auto", file.name
        assert _default_num_workers(hydra.utils.get_object(data._target_)) == "auto", file.name


def _default_num_workers(target) -> object:
    """The default of the first `num_workers` parameter down a class's constructors (a module
    may pass it on in **kwargs), or of a builder function's."""
    functions = [cls.__init__ for cls in target.__mro__] if isinstance(target, type) else [target]
    for function in functions:
        parameter = inspect.signature(function).parameters.get("num_workers")
        if parameter is not None:
            return parameter.default
    return None
