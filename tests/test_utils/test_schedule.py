"""The one rule that scales a recipe to a run's length."""
import pytest
from conftest import FMNIST_CFG
from mmengine.config import Config

from hpm_mm.utils.schedule import (scale_recipe, steps_per_epoch,
                                   teacher_momentum, warmup_epochs)


def test_the_main_jobs_recipe_is_the_rule_at_its_length():
    """10 epochs of 40 steps: the config's own schedule (its cosine ends
    with the run: end 10, T_max 9) and teacher (0.1 -> 0.025 over the run)."""
    cfg = Config.fromfile(FMNIST_CFG)
    scaled = scale_recipe(Config.fromfile(FMNIST_CFG), 10,
                          steps_per_epoch(10000, 256))
    warm, cosine = scaled.param_scheduler
    assert (warm['begin'], warm['end']) == (0, 1) == (
        cfg.param_scheduler[0]['begin'], cfg.param_scheduler[0]['end'])
    assert (cosine['begin'], cosine['end'], cosine['T_max']) == (1, 10, 9)
    assert cfg.param_scheduler[1]['begin'] == 1
    assert 'end' not in cfg.param_scheduler[1]  # follows train_cfg
    teacher = scaled.model.teacher
    assert (teacher.momentum, teacher.end_momentum) == (
        cfg.model.teacher.momentum, cfg.model.teacher.end_momentum)


@pytest.mark.parametrize('epochs,warm', [(1, 0), (2, 1), (10, 1), (30, 2),
                                         (100, 5)])
def test_warmup_and_cosine_follow_the_length(epochs, warm):
    assert warmup_epochs(epochs) == warm
    cfg = scale_recipe(Config.fromfile(FMNIST_CFG), epochs, 40)
    cosine = cfg.param_scheduler[-1]
    assert (cosine['begin'], cosine['end'], cosine['T_max']) == \
        (warm, epochs, epochs - warm)
    assert len(cfg.param_scheduler) == (2 if warm else 1)
    assert cfg.train_cfg.max_epochs == epochs
    assert cfg.model.teacher.momentum_epochs == epochs


def test_teacher_lag_rule():
    assert teacher_momentum(400) == pytest.approx((0.1, 0.025))
    assert teacher_momentum(23500) == pytest.approx((1 / 587.5, 1 / 2350))
    assert teacher_momentum(10) == (0.5, 0.5)  # capped in tiny runs


def test_refuses_what_it_cannot_scale():
    cfg = Config.fromfile(FMNIST_CFG)
    with pytest.raises(ValueError, match='epochs >= 1'):
        scale_recipe(cfg, 0, 40)
    cfg.param_scheduler = [dict(type='MultiStepLR', milestones=[5])]
    with pytest.raises(ValueError, match='MultiStepLR'):
        scale_recipe(cfg, 10, 40)
