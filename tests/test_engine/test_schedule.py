"""The run's length: the one rule that scales a recipe to it, and what
follows train_cfg.max_epochs (issues #29, #31)."""
import pytest
import torch
from helpers import FMNIST_CFG
from mmengine.config import Config

from hpm_mm.engine.schedule import (scale_recipe, steps_per_epoch,
                                    teacher_momentum, warmup_epochs)


def test_the_main_jobs_recipe_is_the_rule_at_its_length():
    """10 epochs of 40 steps: the config's own schedule (1 warm-up epoch
    chained with a cosine over the run, which mmengine ends at
    train_cfg.max_epochs) and teacher (0.1 -> 0.025 over the run)."""
    cfg = Config.fromfile(FMNIST_CFG)
    scaled = scale_recipe(
        Config.fromfile(FMNIST_CFG), 10, steps_per_epoch(10000, 256))
    warm, cosine = scaled.param_scheduler
    assert (warm['begin'], warm['end']) == (0, 1) == (
        cfg.param_scheduler[0]['begin'], cfg.param_scheduler[0]['end'])
    assert (cosine['begin'], cosine['end'], cosine['T_max']) == (0, 10, 10)
    assert cfg.param_scheduler[1]['begin'] == 0
    assert 'end' not in cfg.param_scheduler[1]  # follows train_cfg
    teacher = scaled.model.teacher
    assert (teacher.momentum,
            teacher.end_momentum) == (cfg.model.teacher.momentum,
                                      cfg.model.teacher.end_momentum)


@pytest.mark.parametrize('epochs,warm', [(1, 0), (2, 1), (10, 1), (30, 2),
                                         (100, 5)])
def test_warmup_and_cosine_follow_the_length(epochs, warm):
    assert warmup_epochs(epochs) == warm
    cfg = scale_recipe(Config.fromfile(FMNIST_CFG), epochs, 40)
    cosine = cfg.param_scheduler[-1]
    assert (cosine['begin'], cosine['end'], cosine['T_max']) == \
        (0, epochs, epochs)
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


def _last_scalars(work):
    import glob
    import json
    rows = []
    for path in glob.glob(f'{work}/*/vis_data/scalars.json'):
        rows += [json.loads(line) for line in open(path)]
    return rows


def test_a_longer_or_shorter_run_moves_lr_alpha_and_teacher(tmp_path):
    """--cfg-options train_cfg.max_epochs=3 (the form train.py's hints
    use): the lr decays to its floor at the end of the 3rd epoch and alpha
    follows the 3 epochs (the probes: the lr kept the 10-epoch cosine)."""
    from helpers import tiny_config, train
    cfg = tiny_config(tmp_path, num_images=8)
    work = tmp_path / 'work'
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 3})
    rows = [r for r in _last_scalars(work) if 'lr' in r]
    assert len(rows) == 6  # 2 iterations x 3 epochs
    assert rows[-1]['lr'] < 2e-4 < rows[2]['lr']  # decayed by the end
    assert [round(r['alpha'], 4) for r in rows[::2]] == [0., 0.1667, 0.3333]


def test_teacher_ramp_follows_the_run():
    from hpm_mm.models import EMATeacher
    teacher = EMATeacher(
        torch.nn.Linear(2, 2),
        momentum=0.1,
        end_momentum=0.025,
        momentum_epochs=None)
    teacher.set_epoch(2, max_epochs=3)
    assert teacher.momentum == pytest.approx(0.1 + 2 / 3 * (0.025 - 0.1))
    teacher.set_epoch(2, max_epochs=10)
    assert teacher.momentum == pytest.approx(0.1 + 0.2 * (0.025 - 0.1))
    with pytest.raises(ValueError, match='needs max_epochs'):
        teacher.set_epoch(2)


@pytest.mark.parametrize('option,want', [
    ('max_epochs=1', "reads 'max_epochs' only as train_cfg.max_epochs"),
    ('seed=5', "reads 'seed' only as randomness.seed"),
    ('by_epoch=1', "reads 'by_epoch' only as "
     'custom_hooks.HPMScheduleHook.by_epoch'),
    ('num_workers=2', "reads 'num_workers' only as "
     'train_dataloader.num_workers'),
    ('trian_cfg.max_epochs=5', 'did you mean train_cfg.max_epochs?'),
    ('param_scheduler.1.end=5', 'param_scheduler.1 (CosineAnnealingLR) ends '
     'at epoch 5 but the run has train_cfg.max_epochs=10'),
    ('param_scheduler.1.end=12', 'param_scheduler.1 (CosineAnnealingLR) '
     'ends at epoch 12 but the run has train_cfg.max_epochs=10'),
    ('model.teacher.momentum_epochs=20', 'momentum_epochs=20 is longer '
     'than the run'),
])
def test_options_that_would_do_nothing_or_mismatch_are_refused(
        tmp_path, option, want):
    """One line naming the key and the fix, before anything is built."""
    from hpm_mm.apis import train
    from hpm_mm.errors import HPMError
    key, value = option.split('=')
    with pytest.raises(HPMError) as refused:
        train(FMNIST_CFG, str(tmp_path / 'w'), cfg_options={key: int(value)})
    message = str(refused.value)
    assert '\n' not in message and want in message and 'Fix:' in message, \
        message
    assert not (tmp_path / 'w').exists()  # refused before the work dir


def test_a_refused_option_is_the_last_line_and_a_failed_exit(tmp_path):
    """The same through the command: exit 1, the reason on stderr's last
    line, no work dir."""
    from helpers import tool_main
    proc = tool_main('train.py', FMNIST_CFG, '--work-dir', tmp_path / 'w',
                     '--cfg-options', 'param_scheduler.1.end=5')
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert 'ends at epoch 5 but the run has train_cfg.max_epochs=10' in \
        last and 'Fix:' in last, last
    assert not (tmp_path / 'w').exists()
