"""The quiet console (one line per epoch) and TensorBoard beside mmengine's
logs."""
import os
import os.path as osp

import pytest
from helpers import FMNIST_CFG, tiny_config, train


# --------------------------------------------------------- quiet + tensorboard
def test_quiet_console_and_tensorboard(tmp_path, capsys):
    """--quiet: one line per epoch and the log path on the console, no
    environment dump, config or frozen-parameter warning (all in the log
    file); --tensorboard: the loss curves and hard-patch grids are in the
    event file."""
    pytest.importorskip('tensorboard')
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    vis = (
        "dict(type='HardPatchVisHook', interval=0, num_images=2, num_masks=2,"
        " dataloader=dict(batch_size=2, num_workers=0, sampler=dict("
        "type='DefaultSampler', shuffle=False), dataset=dict(type="
        f"'CustomDataset', data_root={str(tmp_path / 'imgs')!r}, "
        "with_label=False, pipeline=[dict(type='LoadImageFromFile', "
        "color_type='grayscale'), dict(type='CenterCrop', crop_size=28), "
        "dict(type='PackInputs')])))")
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        num_images=8,
        hooks=f"custom_hooks = [dict(type='HPMScheduleHook'), {vis}]",
        body='train_cfg = dict(max_epochs=2)')
    work = tmp_path / 'work'
    # the run's logger, made in this test, writes to capsys
    train(cfg, work, quiet=True, tensorboard=True)
    console = capsys.readouterr()
    out = console.out
    lines = [line for line in out.splitlines() if line.strip()]
    epochs = [line for line in lines if line.startswith('epoch ')]
    assert len(epochs) == 2, out
    assert 'loss_rec' in epochs[0] and 'rank_acc' in epochs[0] and \
        'alpha' in epochs[0] and 'left' in epochs[0]
    assert lines[0].startswith('precision: fp32')  # the decision first
    assert lines[1].startswith('full log: ')
    for noise in ('requires_grad', 'System environment', 'Config:',
                  'pkg_resources', 'Epoch(train)', 'FileClient',
                  'HardDiskBackend'):
        assert noise not in out + console.err, noise
    assert len(lines) <= 7, out
    log_file = lines[1][len('full log: '):]
    log = open(log_file).read()
    assert 'System environment' in log and 'Epoch(train)' in log
    assert 'not optimised (requires_grad=False): teacher' in log and \
        log.count('requires_grad=False') == 1
    events = [
        osp.join(d, f) for d, _, fs in os.walk(work) for f in fs
        if f.startswith('events.out.tfevents')
    ]
    assert events, 'no TensorBoard event file'
    acc = EventAccumulator(
        osp.dirname(events[0]), size_guidance={
            'images': 0,
            'scalars': 0
        })
    acc.Reload()
    tags = acc.Tags()
    assert {'loss_rec', 'rank_acc', 'hpm/spearman'} <= set(tags['scalars'])
    assert {'hard_patches_img0', 'hard_patches_img1'} <= set(tags['images'])


def test_an_iteration_loop_gets_a_line_every_tenth_of_the_run():
    """Under an iteration loop (it has max_epochs too: 1) a line every
    max_iters // 10 iterations, none for its one closing 'epoch'."""
    from types import SimpleNamespace

    from mmengine.logging import MessageHub
    from mmengine.runner import IterBasedTrainLoop

    from hpm_mm.engine.hooks import ConsoleProgressHook
    lines = []
    hub = MessageHub.get_instance('console_progress_iter_test')
    loop = IterBasedTrainLoop.__new__(IterBasedTrainLoop)
    loop._max_epochs = 1  # (as its constructor sets it)
    runner = SimpleNamespace(
        train_loop=loop,
        iter=0,
        epoch=0,
        max_iters=20,
        max_epochs=1,
        train_dataloader=range(20),
        message_hub=hub,
        logger=SimpleNamespace(info=lambda line, **kw: lines.append(line)))
    hook = ConsoleProgressHook(keys=('loss', ))
    hook.before_train(runner)
    for i in range(20):
        runner.iter = i
        hub.update_scalar('train/loss', float(i))
        hook.after_train_iter(runner, i)
    runner.iter = 20
    hook.after_train_epoch(runner)  # the loop's one call, at its end
    want = [['iter', f'{n}/20', 'loss', f'{n - 1.5:.4g}']
            for n in range(2, 21, 2)]  # (the mean of the last 2 losses)
    assert [line.split()[:4] for line in lines] == want, lines
