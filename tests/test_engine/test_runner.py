"""hpm_mm's runner owns the run's policy: built by mmengine's own builder
(``RUNNERS.build``), in this process, it does what tools/train.py does."""
import copy
import json
import logging

import pytest
import torch
from helpers import CUDA, FMNIST_CFG, NEEDS_CUDA, TINY_RUN, tiny_config
from mmengine.config import Config
from mmengine.registry import RUNNERS

from hpm_mm.engine.runner import HPMRunner
from hpm_mm.engine.work_dir import WorkDirBusy, own_work_dir, release_work_dir
from hpm_mm.errors import HPMError


def _cfg(tmp_path, body='', epochs=1, work='work'):
    path = tiny_config(
        tmp_path,
        body=TINY_RUN.format(keep=1, epochs=epochs) + body,
        num_images=8)
    cfg = Config.fromfile(path)
    cfg.work_dir = str(tmp_path / work)
    return cfg


AMP = "optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic')"


def test_the_configs_name_the_runner(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.runner_type == 'HPMRunner'
    assert RUNNERS.get('HPMRunner') is HPMRunner


def test_amp_config_trains_in_the_rules_precision(tmp_path, capsys):
    """mmengine's builder on an AMP config (mmengine's wrapper cannot be
    built without a GPU): precision='auto' on a CPU is fp32, decided when
    the runner is built; the console line, precision.json and
    runner.precision agree; 'bf16' asked trains under bf16 autocast."""
    runner = RUNNERS.build(_cfg(tmp_path, AMP, work='amp'))
    assert type(runner) is HPMRunner and runner.precision.name == 'fp32'
    runner.train()
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith('precision:'))
    assert line == runner.precision.line() and 'CPU: fp32' in line, line
    assert type(runner.optim_wrapper).__name__ == 'GuardedOptimWrapper'
    with open(tmp_path / 'amp' / 'precision.json') as f:
        assert json.load(f)['precision'] == 'fp32'
    bf16 = RUNNERS.build(
        _cfg(tmp_path, AMP + "\nprecision = 'bf16'", work='bf16'))
    bf16.train()
    assert type(bf16.optim_wrapper).__name__ == 'AutocastOptimWrapper'
    assert bf16.precision.name == 'bf16' and bf16.iter == 2


def test_run_length_the_schedule_does_not_fit_is_refused(tmp_path):
    """A cosine that ends at epoch 10 of a 2-epoch run, or a teacher ramp
    longer than the run: one HPMError, nothing written to the work dir."""
    for body in ('param_scheduler = [dict(type="CosineAnnealingLR", '
                 'by_epoch=True, begin=0, end=10, T_max=10)]',
                 'model = dict(teacher=dict(momentum_epochs=5))'):
        cfg = _cfg(tmp_path, body, epochs=2)
        with pytest.raises(HPMError) as e:
            RUNNERS.build(cfg)
        assert '\n' not in str(e.value) and 'Fix:' in str(e.value)
    assert not (tmp_path / 'work').exists()


def test_second_run_in_a_busy_work_dir_is_refused(tmp_path):
    cfg = _cfg(tmp_path)
    lock = own_work_dir(cfg.work_dir)
    try:
        with pytest.raises(WorkDirBusy, match='in use by a running job'):
            HPMRunner.from_cfg(cfg)
    finally:
        lock.close()
    runner = HPMRunner.from_cfg(cfg)  # free again: it trains
    runner.train()
    # the run released the work dir when it ended
    own_work_dir(cfg.work_dir).close()


def test_a_finished_run_frees_its_work_dir_while_its_workers_live(tmp_path):
    """Dataloader workers forked during a run share the lock's open file;
    persistent ones outlive train(). The run's end frees the work dir all
    the same (a notebook's or a driver's next run in the same dir)."""
    import multiprocessing
    import time
    lock = own_work_dir(str(tmp_path))
    ctx = multiprocessing.get_context('fork')
    worker = ctx.Process(target=time.sleep, args=(3600, ))
    worker.start()  # holds a copy of the lock's file descriptor
    try:
        release_work_dir(lock)
        release_work_dir(own_work_dir(str(tmp_path)))
    finally:
        worker.kill()
        worker.join()


def test_resume_and_load_from_checks(tmp_path):
    """resume=True takes the newest complete checkpoint and refuses to
    start from scratch over damaged ones; load_from a checkpoint of another
    architecture is refused before the first step."""
    cfg = _cfg(tmp_path)
    RUNNERS.build(cfg).train()
    ckpt = tmp_path / 'work' / 'epoch_1.pth'
    again = _cfg(tmp_path, epochs=2)
    again.resume = True
    with pytest.raises(HPMError, match=r'max_epochs 1 -> 2'):
        RUNNERS.build(again)  # the schedule of the 1-epoch run would stay
    again.resume_changed_run = True
    runner = RUNNERS.build(again)
    assert runner._load_from == str(ckpt)
    runner.train()
    assert runner.epoch == 2
    ckpt = tmp_path / 'work' / 'epoch_2.pth'
    damaged = _cfg(tmp_path, work='damaged')
    (tmp_path / 'damaged').mkdir()
    (tmp_path / 'damaged' / 'epoch_3.pth').write_bytes(b'cut short')
    damaged.resume = True
    with pytest.raises(HPMError, match='no complete checkpoint'):
        RUNNERS.build(damaged)
    other = _cfg(
        tmp_path, 'model = dict(backbone=dict(arch=dict(embed_dims=24, '
        'feedforward_channels=48)), neck=dict(embed_dim=24))',
        work='other')
    other.load_from = str(ckpt)
    with pytest.raises(HPMError, match='another architecture'):
        RUNNERS.build(other).train()


def test_a_run_knows_what_it_continues(tmp_path):
    """A new run in a work dir holding another run's checkpoints is
    refused; --resume of a run whose length, batch, lr or process count
    changed is refused naming what changed; a copied work dir resumes from
    its own files (last_checkpoint names the original's); a refused start
    leaves the work dir's config copy as it was."""
    import shutil
    cfg = _cfg(tmp_path)
    RUNNERS.build(cfg).train()
    with pytest.raises(HPMError, match='checkpoints of an earlier run'):
        RUNNERS.build(_cfg(tmp_path))
    for body, what in (
        ('train_dataloader = dict(batch_size=2)', 'batch_size 4 -> 2'),
        ('optim_wrapper = dict(optimizer=dict(lr=1e-4))',
         'optimizer.lr 0.0015 -> 0.0001'),
    ):
        changed = _cfg(tmp_path, body)
        changed.resume = True
        with pytest.raises(HPMError, match=what) as e:
            RUNNERS.build(changed)
        assert '\n' not in str(e.value) and 'resume_changed_run' in str(
            e.value)
    os_environ = __import__('os').environ
    os_environ['WORLD_SIZE'] = '2'
    try:
        same = _cfg(tmp_path)
        same.resume = True
        with pytest.raises(HPMError, match=r'WORLD_SIZE\) 1 -> 2'):
            RUNNERS.build(same)
    finally:
        del os_environ['WORLD_SIZE']
    # a copy of the work dir resumes from the copy's files
    shutil.copytree(tmp_path / 'work', tmp_path / 'copy')
    copy = _cfg(tmp_path, work='copy')
    copy.resume = True
    runner = RUNNERS.build(copy)
    assert runner._load_from == str(tmp_path / 'copy' / 'epoch_1.pth')
    runner.release_work_dir()
    # a resume refused for a changed architecture keeps the config copy
    dumped = tmp_path / 'work' / 'tiny_cfg.py'
    before = dumped.read_text()
    other = _cfg(
        tmp_path,
        'model = dict(neck=dict(decoder_embed_dim=16, decoder_num_heads=2))')
    other.resume = True
    with pytest.raises(HPMError, match='the config changed'):
        RUNNERS.build(other)
    assert dumped.read_text() == before


def test_each_runner_gets_its_own_visualizer(tmp_path):
    """A config naming its visualizer (mmdet's, mmseg's name='visualizer')
    gets a new one per runner: a second run of the process writes its
    scalars into its own folder, not the first run's."""
    import glob
    for work in ('a', 'b'):
        cfg = _cfg(tmp_path, work=work)
        cfg.visualizer.name = 'visualizer'
        RUNNERS.build(cfg).train()
        assert glob.glob(
            str(tmp_path / work / '*' / 'vis_data' / 'scalars.json')), work


@pytest.mark.parametrize('where', ['top-level', 'model'])
def test_a_selfsup_preprocessor_checks_the_images_channels(tmp_path, where):
    """The runner checks the channels at the built model's preprocessor,
    mmpretrain's own SelfSupDataPreprocessor (what the ImageNet configs
    inherit) included, whichever config key set it: grayscale images into
    an RGB model are one line at the first batch (an IndexError in the
    channel swap before)."""
    import torch
    pre = ("type='SelfSupDataPreprocessor', mean=[1., 2., 3.], "
           "std=[1., 1., 1.], to_rgb=True")
    if where == 'top-level':
        body = f'data_preprocessor = dict(_delete_=True, {pre})\n' \
            'model = dict(backbone=dict(patch_cfg=dict(in_channels=3)))'
    else:  # mmpretrain's usual place; the top-level one is dropped
        body = 'data_preprocessor = None\n' \
            'model = dict(backbone=dict(patch_cfg=dict(in_channels=3)), ' \
            f'data_preprocessor=dict({pre}))'
    cfg = _cfg(tmp_path, body=body)
    runner = RUNNERS.build(cfg)
    pre = runner.model.data_preprocessor
    assert type(pre).__name__ == 'SelfSupDataPreprocessor'
    assert pre.mean.flatten().tolist() == [1., 2., 3.]
    from hpm_mm.errors import HPMError
    with pytest.raises(
            HPMError,
            match=r'the images have 1 channel\(s\) '
            'but the model takes 3'):
        pre(dict(inputs=[torch.zeros(1, 28, 28, dtype=torch.uint8)]))
    runner.release_work_dir()


def compiled_runs(tmp_path, modes):
    """The tiny run eager and compiled in each of ``modes``: per mode the
    logged losses step by step and the runner's log lines."""
    from hpm_mm.apis import train
    cfg = tiny_config(
        tmp_path, body=TINY_RUN.format(keep=1, epochs=1), num_images=12)
    runs = {}
    for mode in (None, ) + modes:
        compile_ = mode is not None and (dict(mode=mode) if mode else True)
        if isinstance(compile_, dict) and not CUDA:  # the CPU: default
            compile_['backend'] = 'eager'  # mode (the True run built it)
        work = tmp_path / f'compile_{mode}'
        runner = train(
            cfg,
            str(work),
            quiet=True,
            compile=compile_,
            randomness=dict(seed=0, deterministic=False))
        model = runner.model
        for encoder in (model.backbone, model.teacher.module['backbone']):
            assert encoder._compiled_call_impl is None  # block by block
            blocks = [
                b._compiled_call_impl is not None for b in encoder.layers
            ]
            assert blocks and set(blocks) == {bool(compile_)}
        runs[mode] = ({
            k:
            list(runner.message_hub.log_scalars[f'train/{k}'].data[0])
            for k in ('loss_rec', 'loss_pred', 'rank_acc')
        }, next(work.glob('*/*.log')).read_text())
    for mode in modes:
        for key, eager in runs[None][0].items():
            assert len(eager) == 3
            torch.testing.assert_close(
                torch.tensor(runs[mode][0][key]),
                torch.tensor(eager),
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m, key=key: key + m)
    return runs


def test_compile_key_compiles_the_parts_and_keeps_the_losses(tmp_path):
    """mmengine's ``compile=True`` on an HPM config: the student's encoder
    and neck and the teacher's encoder run through torch.compile, block by
    block (the optimizer wrapper and teacher update stay eager), and the run
    logs the losses of the eager run, step by step, each block one graph (no
    graph break: mmpretrain's drop-path rates are numpy scalars, which dynamo
    traces as arrays); CUDA graphs (``mode='reduce-overhead'``) on a CPU:
    the default mode, said in a line."""
    from torch._dynamo.utils import counters
    counters.clear()
    runs = compiled_runs(tmp_path, ('', 'reduce-overhead'))
    assert not counters['graph_break'], dict(counters['graph_break'])
    assert "mode='reduce-overhead' replays CUDA graphs, which need a GPU" \
        in runs['reduce-overhead'][1]


def test_the_compiled_blocks_are_the_innermost_repeated_ones():
    """compile_parts' regions: a ViT's layers; a Swin's blocks, not the
    stages that hold them; nothing in a part without a list (compiled
    whole)."""
    from mmpretrain.models import SwinTransformer, VisionTransformer

    from hpm_mm.models.selfsup.base import _blocks
    vit = VisionTransformer(
        arch=dict(
            embed_dims=16, num_layers=3, num_heads=2, feedforward_channels=32))
    assert _blocks(vit) == list(vit.layers)
    swin = SwinTransformer(
        arch=dict(embed_dims=16, depths=[2, 1], num_heads=[2, 2]),
        img_size=32,
        out_indices=(1, ))
    assert _blocks(swin) == [b for s in swin.stages for b in s.blocks]
    assert _blocks(torch.nn.Sequential(torch.nn.Linear(2, 2))) == []


@pytest.mark.cuda
@NEEDS_CUDA
def test_cuda_graphs_keep_the_losses(tmp_path):
    """``compile=dict(mode='reduce-overhead')`` on a GPU: the parts replay
    CUDA graphs (one generation per iteration), the losses the eager run's."""
    runs = compiled_runs(tmp_path, ('reduce-overhead', ))
    assert 'need a GPU' not in runs['reduce-overhead'][1]


def test_a_run_under_mmengines_own_runner_says_so_once(tmp_path, monkeypatch):
    """mmengine's Runner.from_cfg ignores runner_type: the run trains, and
    says once that it does so without hpm_mm's policy."""
    from mmengine.logging import MMLogger
    from mmengine.runner import Runner

    from hpm_mm.engine.hooks import hpm_schedule_hook
    monkeypatch.setattr(hpm_schedule_hook, '_WARNED_RUNNER', False)
    seen = []
    for n in range(2):
        runner = Runner.from_cfg(_cfg(tmp_path, work=f'plain{n}'))
        logger = MMLogger.get_current_instance()
        handler = logging.Handler()
        handler.emit = lambda r: seen.append(r.getMessage())
        logger.addHandler(handler)
        try:
            runner.train()
        finally:
            logger.removeHandler(handler)
    warned = [m for m in seen if "not hpm_mm's HPMRunner" in m]
    assert len(warned) == 1 and 'Runner.from_cfg ignores' in warned[0]
    assert 'under Runner' in warned[0]


def test_the_knn_hook_says_when_the_bank_is_the_evaluated_set(tmp_path):
    """A training run's kNN hook on one folder as bank and evaluated set:
    a warning in the log and in knn.json (the tool says it too)."""
    from hpm_mm.apis import train
    from hpm_mm.evaluation import SAME_SET
    loader = dict(
        batch_size=4,
        num_workers=0,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate'),
        dataset=dict(
            type='CustomDataset',
            data_root=str(tmp_path / 'imgs'),
            pipeline=[
                dict(type='LoadImageFromFile', color_type='grayscale'),
                dict(type='Resize', scale=28),
                dict(type='PackInputs')
            ]))
    hook = dict(
        type='KNNEvalHook',
        ks=[1],
        interval=0,
        train_dataloader=loader,
        val_dataloader=loader)
    cfg = tiny_config(
        tmp_path,
        body=TINY_RUN.format(keep=1, epochs=1),
        num_images=8,
        hooks=f"custom_hooks = [dict(type='HPMScheduleHook'), {hook!r}]")
    runner = train(cfg, str(tmp_path / 'work'), quiet=True)
    with open(tmp_path / 'work' / 'knn.json') as f:
        done = json.load(f)
    assert done['warnings'] == [SAME_SET]
    # what a hook may read (docs/extending.md): the last result, as written
    knn = next(h for h in runner.hooks if type(h).__name__ == 'KNNEvalHook')
    assert knn.last_result == {int(k): v for k, v in done['acc'].items()}
    logged = runner.message_hub.log_scalars  # knn/top1_k{k}, knn/top1_best
    assert logged['knn/top1_k1'].current() == done['acc']['1'] == \
        logged['knn/top1_best'].current()
    log = open(runner.logger.handlers[-1].baseFilename).read()
    assert f'kNN: {SAME_SET}' in log
    # the stage says what it extracts (minutes on a CPU, silent before)
    assert 'kNN: the features of the 8 bank images' in log and \
        'kNN: the features of the 8 evaluated images' in log


def test_the_runs_config_is_formatted_once_per_content(monkeypatch):
    """mmengine formats the whole config with yapf for the start's log, the
    work dir's copy and every checkpoint's meta (~0.25 s each on a CPU: a
    third of a tiny run): the runner's config does it once per content, and
    again after a change, the text mmengine's own."""
    import mmengine.config.config as config_module

    from hpm_mm.engine.runner import FormattedOnce
    cfg = Config.fromfile(FMNIST_CFG)
    once = FormattedOnce.of(copy.deepcopy(cfg))
    calls = []
    real = config_module.FormatCode
    monkeypatch.setattr(config_module, 'FormatCode',
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert once.pretty_text == cfg.pretty_text and len(calls) == 2
    assert once.pretty_text == copy.deepcopy(once).pretty_text
    assert len(calls) == 2  # (the copy keeps the text of its content)
    once.train_cfg.max_epochs = 3
    assert 'max_epochs=3' in once.pretty_text and len(calls) == 3
    assert once.pretty_text == Config(once.to_dict()).pretty_text


def test_the_runner_builds_the_engines_plugins_by_name():
    """The engine's own modules (runner, resume, ...) name the hooks and
    optimizer wrappers they need by registry name, as mmengine registers
    its default hooks; only functions come from engine/hooks/ and
    engine/optimizers/ (runner.py imported CUDAGraphStepHook: an arrow back
    up)."""
    import ast
    import inspect
    import os.path as osp
    from glob import glob

    import hpm_mm.engine
    root = osp.dirname(hpm_mm.engine.__file__)
    up = []
    for path in glob(osp.join(root, '[!_]*.py')):  # (not __init__.py)
        for node in ast.walk(ast.parse(open(path).read())):
            package = (getattr(node, 'module', '') or '').split('.')[0]
            if isinstance(node, ast.ImportFrom) and node.level == 1 and \
                    package in ('hooks', 'optimizers'):
                module = __import__(
                    f'hpm_mm.engine.{node.module}', fromlist=['*'])
                up += [
                    f'{osp.basename(path)}: {a.name}' for a in node.names
                    if inspect.isclass(getattr(module, a.name))
                ]
    assert not up, up
