"""A shipped warm-up is a share of the run, so a quick run or a short search trial needs no
second key; a warm-up a person sets in steps longer than the run is still refused."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from helpers.config import checked
from xfmr.errors import UserError
from xfmr.paths import config_dir
from xfmr.ranges import warmup_length


def _compose(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=True)


def _warmup(cfg) -> int:
    return warmup_length(
        cfg.schedule.warmup_steps, cfg.schedule.warmup_ratio, cfg.trainer.max_steps
    )


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("to be or not to be\n" * 50)
    return path


def test_a_quick_run_of_an_experiment_needs_one_key(corpus) -> None:
    cfg = _compose(
        ["experiment=nanogpt_shakespeare_char", f"data.path={corpus}", "trainer.max_steps=30"]
    )
    checked(cfg)
    assert _warmup(cfg) == 2  # 0.05 of 30 steps, rounded


def test_the_full_nanogpt_run_keeps_its_100_step_warmup() -> None:
    """nanoGPT's lr at steps 99 and 100: 1e-3 * 100 / 101, then the peak."""
    import torch

    cfg = _compose(["experiment=nanogpt_shakespeare_char"])
    assert _warmup(cfg) == 100
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = instantiate(cfg.schedule)(optimizer, total_steps=cfg.trainer.max_steps)
    lrs = []
    for _ in range(101):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[99] == pytest.approx(1e-3 * 100 / 101) and lrs[100] == pytest.approx(1e-3)


def test_every_warmup_of_the_lr_search_fits_a_20_step_trial(corpus) -> None:
    space = yaml.safe_load((config_dir() / "hparams_search" / "nanogpt_lr.yaml").read_text())
    params = space["hydra"]["sweeper"]["params"]
    assert "schedule.warmup_steps" not in params
    choices = params["schedule.warmup_ratio"].removeprefix("choice(").removesuffix(")")
    for ratio in choices.split(","):
        cfg = _compose(
            [
                "experiment=nanogpt_shakespeare_char",
                f"data.path={corpus}",
                "trainer.max_steps=20",
                f"schedule.warmup_ratio={ratio.strip()}",
            ]
        )
        checked(cfg)
        assert 1 <= _warmup(cfg) <= 2


def test_warmup_steps_set_by_a_person_win_and_are_refused_past_the_run(corpus) -> None:
    cfg = _compose(["experiment=nanogpt_shakespeare_char", "schedule.warmup_steps=20"])
    assert _warmup(cfg) == 20  # over the experiment's warmup_ratio
    cfg = _compose(
        [
            "experiment=nanogpt_shakespeare_char",
            f"data.path={corpus}",
            "trainer.max_steps=30",
            "schedule.warmup_steps=50",
        ]
    )
    with pytest.raises(UserError, match=r"schedule.warmup_steps=50 .* trainer.max_steps=30"):
        checked(cfg)


def test_noam_needs_a_warmup_in_either_form() -> None:
    cfg = _compose(["schedule=noam", "schedule.warmup_ratio=0"])
    with pytest.raises(UserError, match=r"schedule.warmup_ratio=0 with schedule=noam"):
        checked(cfg)
