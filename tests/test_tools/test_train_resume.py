"""Training trains, checkpoints and resumes (torch >= 2.6 safe load), through
hpm_mm.apis.train (tools/train.py's)."""
import glob
import json
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from helpers import (FMNIST_CFG, HPM_HOOKS, RANDOM_CROP, REPO, TINY_RUN,
                     tiny_config, train)
from mmengine.config import Config
from mmengine.runner import Runner

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types)
from hpm_mm.errors import HPMError

MAE_TINY = '''
_base_ = ['mmpretrain::_base_/models/mae_vit-base-p16.py',
          'mmpretrain::_base_/default_runtime.py']
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=1,
                            num_heads=2,
                            feedforward_channels=64),
                  img_size=28, patch_size=4, patch_cfg=dict(in_channels=1)),
    neck=dict(num_patches=49, patch_size=4, in_chans=1, embed_dim=32,
              decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2),
    head=dict(patch_size=4, in_channels=1),
    data_preprocessor=dict(type='SelfSupDataPreprocessor', mean=[72.94],
                           std=[90.02], to_rgb=False))
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3))
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=2)
train_dataloader = dict(
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'), dataset=dict())
env_cfg = dict(dist_cfg=dict(backend='gloo'))
'''


def _scalars(work_dir):
    logs = sorted(
        glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    rows = []
    for log in logs:
        with open(log) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def _train_then_resume(tmp_path, base, body, hooks):
    """Train 1 epoch (2 iterations), then resume to 2 epochs; return the
    work dir and the two checkpoints."""
    cfg = tiny_config(
        tmp_path, base=base, body=body, num_images=8, hooks=hooks)
    work = str(tmp_path / 'work')
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 1})
    first = osp.join(work, 'epoch_1.pth')
    assert osp.exists(first)
    # extends the 1-epoch run to 2: a change of the run, asked for
    log = train(
        cfg, work, resume=first, cfg_options=dict(resume_changed_run=True))
    assert 'resumed epoch: 1, iter: 2' in log
    assert 'the run changed since' in log
    return cfg, work, first, osp.join(work, 'epoch_2.pth')


def _check_resumed_state(cfg_path, work, first):
    """Load ``first`` the way --resume does and compare every state."""
    ckpt = torch.load(first, map_location='cpu')  # weights_only by default
    cfg = Config.fromfile(cfg_path)
    cfg.work_dir = str(work) + '_check'
    cfg.resume, cfg.load_from = True, first
    runner = Runner.from_cfg(cfg)
    runner._train_loop = runner.build_train_loop(runner._train_loop)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.scale_lr(runner.optim_wrapper, runner.auto_scale_lr)
    if runner.param_schedulers is not None:
        runner.param_schedulers = runner.build_param_scheduler(
            runner.param_schedulers)
    runner.load_or_resume()
    assert runner.iter == 2 and runner.epoch == 1
    for k, v in runner.model.state_dict().items():
        assert torch.equal(v, ckpt['state_dict'][k]), k
    opt = runner.optim_wrapper.optimizer.state_dict()
    steps = {float(s['step']) for s in opt['state'].values()}
    assert steps == {2.0}
    saved = ckpt['optimizer']['state']
    for i, s in opt['state'].items():
        assert torch.equal(s['exp_avg'], saved[i]['exp_avg'])
    for sch, saved in zip(runner.param_schedulers or [],
                          ckpt.get('param_schedulers', [])):
        assert sch.state_dict() == saved
    assert runner.message_hub.get_info('iter') is not None
    return ckpt


def test_mae_trains_and_resumes(tmp_path):
    base = str(tmp_path / 'mae_tiny.py')
    with open(base, 'w') as f:
        f.write(MAE_TINY)
    cfg, work, first, second = _train_then_resume(tmp_path, base, '',
                                                  'custom_hooks = []')
    _check_resumed_state(cfg, work, first)
    ckpt = torch.load(second, map_location='cpu')
    assert ckpt['meta']['iter'] == 4 and ckpt['meta']['epoch'] == 2
    rows = [r for r in _scalars(work) if 'loss' in r]
    assert [r['iter'] for r in rows] == [1, 2, 3, 4]


def test_hpm_trains_and_resumes_with_teacher(tmp_path):
    # alpha 0.5 -> 1: the teacher runs from the first step
    body = ('model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))\n'
            'train_cfg = dict(max_epochs=2)\n')
    cfg, work, first, second = _train_then_resume(tmp_path, FMNIST_CFG, body,
                                                  HPM_HOOKS)
    ckpt = _check_resumed_state(cfg, work, first)
    sd = ckpt['state_dict']
    assert any(k.startswith('teacher.module.backbone.') for k in sd)
    assert int(sd['teacher.steps']) == 2
    # the student encoder keeps VisionTransformer key names under backbone.
    assert 'backbone.layers.0.attn.qkv.weight' in sd
    ckpt2 = torch.load(second, map_location='cpu')
    assert int(ckpt2['state_dict']['teacher.steps']) == 4
    rows = [r for r in _scalars(work) if 'loss_rec' in r]
    assert [r['iter'] for r in rows] == [1, 2, 3, 4]
    # alpha follows epochs: 0.5 in epoch 0, 0.75 in epoch 1 (T = 2)
    assert [r['alpha'] for r in rows] == [0.5, 0.5, 0.75, 0.75]
    assert all(r['num_hard'] > 0 for r in rows)


OLD_LAYOUT_CKPT = osp.join(
    osp.dirname(osp.dirname(__file__)), 'data', 'hpm_tiny_v0_epoch_1.pth')
# the v0 checkpoint's model: 32-px inputs (64 patches), as the configs then
TINY_HPM = '''
model = dict(
    backbone=dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2,
                            feedforward_channels=32), img_size=32),
    neck=dict(embed_dim=16, decoder_embed_dim=8, decoder_depth=1,
              decoder_num_heads=2, num_patches=64),
    mask_generator=dict(alpha_0=0.5, alpha_T=1.0))
train_cfg = dict(max_epochs=2)
'''

CROP_32 = RANDOM_CROP.replace('scale=28', 'scale=32')


def test_resumes_a_checkpoint_written_before_the_parts_split(tmp_path):
    """tests/data/hpm_tiny_v0_epoch_1.pth was written by tools/train.py at
    commit 7641b6d (teacher arguments on HPM, HPMDistributedDataParallel, a
    plain OptimWrapper, the predictor trunk and the teacher's decoder under
    their old keys): the refactored model loads it strictly (the key map)
    and resumes it."""
    ckpt = torch.load(OLD_LAYOUT_CKPT, map_location='cpu')
    assert 'teacher_momentum=0.1' in ckpt['meta']['cfg']  # the old layout
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_HPM, num_images=8, transform=CROP_32)
    from hpm_mm.apis import load_model
    model = load_model(Config.fromfile(cfg))
    model.load_state_dict(ckpt['state_dict'], strict=True)
    work = str(tmp_path / 'work')
    # it records no run signature: its schedulers' saved ends say that it
    # was a 10-epoch run (20 iterations), this config a 2-epoch one
    with pytest.raises(HPMError) as refused:
        train(cfg, work, resume=OLD_LAYOUT_CKPT)
    assert 'param_scheduler.1 (CosineAnnealingLR) end 20 -> 4 iterations' \
        in str(refused.value) and '\n' not in str(refused.value)
    log = train(
        cfg,
        work,
        resume=OLD_LAYOUT_CKPT,
        cfg_options=dict(resume_changed_run=True))
    assert 'resumed epoch: 1, iter: 2' in log
    # its optimizer kept mmengine's one group per parameter: merged
    assert "the checkpoint's 64 optimizer groups (one per parameter) " \
        'merged by setting into 2' in log
    sd = torch.load(
        osp.join(work, 'epoch_2.pth'), map_location='cpu')['state_dict']
    # saved in today's keys: the v0 keys through the one key map
    from hpm_mm.models import HPM
    upgraded = HPM.upgrade_state_dict(ckpt['state_dict'])
    assert sd.keys() == upgraded.keys() != ckpt['state_dict'].keys()
    assert 'neck.predictor.blocks.0.attn.qkv.weight' in sd
    assert 'teacher.module.scorer.predictor.blocks.0.attn.qkv.weight' in sd
    assert int(sd['teacher.steps']) == 4  # 2 before, one per applied step


@pytest.mark.parametrize('runner', ['HPMRunner', 'HPMFlexibleRunner'])
def test_a_checkpoint_with_one_group_per_parameter_resumes(tmp_path, runner):
    """A run saved by mmengine's constructor (one optimizer group per
    parameter, as hpm_mm saved before merging them) resumes under either
    runner (FlexibleRunner loads through its strategy): the groups merged
    in one line, the run completed in the merged layout."""
    body = TINY_RUN.format(keep=2, epochs=2) + f'runner_type = {runner!r}\n'
    cfg = tiny_config(tmp_path, body=body, num_images=8)
    work = str(tmp_path / 'work')
    train(
        cfg,
        work,
        cfg_options={
            'train_cfg.max_epochs': 1,
            'optim_wrapper.constructor': 'DefaultOptimWrapperConstructor'
        })
    first = torch.load(osp.join(work, 'epoch_1.pth'), map_location='cpu')
    n = len(first['optimizer']['param_groups'])
    assert n > 20
    log = train(
        cfg, work, resume=True, cfg_options=dict(resume_changed_run=True))
    assert f"the checkpoint's {n} optimizer groups (one per parameter) " \
        'merged by setting into 2' in log, log
    last = torch.load(osp.join(work, 'epoch_2.pth'), map_location='cpu')
    assert len(last['optimizer']['param_groups']) == 2
    assert {float(s['step'])
            for s in last['optimizer']['state'].values()
            } == {4.0}  # two steps before the resume, two after


def test_teacher_of_a_v0_checkpoint_loads_into_the_student(tmp_path):
    """knn_eval --teacher's loader on the v0 checkpoint: the teacher's old
    decoder keys (teacher.module.neck.predictor_blocks...) land in the
    student's decoder (neck.predictor.blocks...), nothing required
    missing."""
    from hpm_mm.apis import load_model
    from hpm_mm.apis.model import load_checkpoint_strict
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_HPM, num_images=8, transform=CROP_32)
    model = load_model(Config.fromfile(cfg))
    result = load_checkpoint_strict(model, OLD_LAYOUT_CKPT, teacher=True)
    assert not [k for k in result['missing'] if not k.startswith('head.')]
    old = torch.load(OLD_LAYOUT_CKPT, map_location='cpu')['state_dict']
    assert torch.equal(
        model.neck.predictor.blocks[0].attn.qkv.weight,
        old['teacher.module.neck.predictor_blocks.0.attn.qkv.weight'])
    assert torch.equal(model.backbone.pos_embed,
                       old['teacher.module.backbone.pos_embed'])


TWO_PIC = ("dict(type='RandomResizedCropAndInterpolationWithTwoPic', "
           "size=28, second_size=56, scale=(0.5, 1.0))")
MULTI_CROP = ("dict(type='MultiView', num_views=[2, 2], transforms=["
              "[dict(type='RandomResizedCrop', scale=28, backend='pillow')], "
              "[dict(type='RandomResizedCrop', scale=16, backend='pillow')]])")


@pytest.mark.parametrize(
    'name,body,transform',
    [
        ('hpm/targets/hpm-ema-feat_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
         'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))', None),
        # the DINO target's architecture with random weights (nothing to load)
        ('hpm/targets/hpm-ema-feat_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
         "model = dict(target_generator=dict(_delete_=True, "
         "type='ViTFeatureTarget', checkpoint=None, "
         "arch=dict(embed_dims=48, num_layers=1, num_heads=2, "
         "feedforward_channels=96), img_size=28, patch_size=4, "
         "in_channels=1), "
         "neck=dict(predict_feature_dim=48), "
         "mask_generator=dict(alpha_0=0.5, alpha_T=1.0))", None),
        ('hpm/frameworks/hpm-simmim_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
         'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))', None),
        ('hpm/frameworks/hpm-beit_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
         'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))',
         TWO_PIC),
        # every image masked (10-50%), so each step has hard patches
        ('hpm/frameworks/hpm-ibot_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
         'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0, '
         'mask_ratio=[(0.1, 0.5)]))', MULTI_CROP),
    ],
    ids=['ema-target', 'vit-target', 'simmim', 'beit', 'ibot'])
def test_new_targets_and_frameworks_train_and_resume(tmp_path, name, body,
                                                     transform):
    base = osp.join(REPO, 'configs', name)
    cfg = tiny_config(
        tmp_path,
        base=base,
        num_images=8,
        body=body + '\ntrain_cfg = dict(max_epochs=2)\n',
        **({
            'transform': transform
        } if transform else {}))
    work = str(tmp_path / 'work')
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 1})
    first = osp.join(work, 'epoch_1.pth')
    # extends the 1-epoch run to 2: a change of the run, asked for
    log = train(
        cfg, work, resume=first, cfg_options=dict(resume_changed_run=True))
    assert 'resumed epoch: 1, iter: 2' in log
    assert 'the run changed since' in log
    ckpt = _check_resumed_state(cfg, work, first)
    assert int(ckpt['state_dict']['teacher.steps']) == 2
    rows = [r for r in _scalars(work) if 'loss_rec' in r]
    assert [r['iter'] for r in rows] == [1, 2, 3, 4]
    assert all(
        r.get('num_hard', 1) > 0 and r['alpha'] >= 0.5
        and 0 <= r['rank_acc'] <= 1 for r in rows)
    # the encoder converts to a plain ViT, every tensor used (strict)
    from helpers import tool_main
    out = str(tmp_path / 'vit.pth')
    conv = tool_main('model_converters/hpm2backbone.py',
                     osp.join(work, 'epoch_2.pth'), out, '--target',
                     'mmpretrain')
    assert conv.returncode == 0, conv.stderr
    assert 'every tensor of the backbone loaded' in conv.stdout, conv.stdout


def imagenet_folder(root, per_class=4):
    """mmpretrain's ImageNet layout: train/<class>/<image> and
    meta/train.txt (``<class>/<image> <label>``), RGB images."""
    from helpers import make_image_folder
    make_image_folder(
        str(root / 'train'), per_class=per_class, size=64, gray=False)
    lines = [
        f'{c.name}/{f.name} {i}'
        for i, c in enumerate(sorted((root / 'train').iterdir()))
        for f in sorted(c.iterdir())
    ]
    (root / 'meta').mkdir()
    (root / 'meta' / 'train.txt').write_text('\n'.join(lines) + '\n')
    return str(root)


TINY_VIT = dict(
    embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64)
SIZES = {224: 64, 112: 32, 96: 32}  # the crops, at patch 16: 4x4 patches


def shrink(model):
    """The same model at toy size: ViTs 32-d with 1 block on 64-px images
    (patch 16 kept), decoders / predictors / heads / targets to match,
    target networks without weight files."""
    model.backbone.update(arch=TINY_VIT, img_size=64)
    small = dict(
        HPMPretrainDecoder=dict(
            num_patches=16,
            embed_dim=32,
            decoder_embed_dim=16,
            decoder_depth=1,
            decoder_num_heads=2),
        HPMSimMIMDecoder=dict(in_channels=32),
        iBOTNeck=dict(
            in_channels=32,
            hidden_channels=48,
            bottleneck_channels=16,
            out_channels=64),
        HPMBEiTHead=dict(embed_dims=32, num_embed=64),
        HPMiBOTHead=dict(out_channels=64),
        HPMLossPredictor=dict(
            embed_dim=32,
            predictor_embed_dim=16,
            predictor_depth=1,
            predictor_num_heads=2),
        ViTFeatureTarget=dict(arch=TINY_VIT, img_size=64, checkpoint=None),
        CLIPFeatureTarget=dict(
            img_size=64,
            width=32,
            layers=1,
            heads=2,
            output_dim=24,
            checkpoint=None),
        **{'DALL-E': dict(n_hid=8, vocab_size=64, init_cfg=None)})
    for part in ('neck', 'head', 'predictor', 'target_generator'):
        if model.get(part):
            model[part].update(small.get(model[part].type, {}))
    if model.get('neck', {}).get('predict_feature_dim'):  # feature targets
        model.neck.predict_feature_dim = dict(CLIPFeatureTarget=24).get(
            model.target_generator.type, 32)


def resize_crops(transforms):
    """224 / 112 / 96 px crops -> 64 / 32 / 32 px, in nested pipelines."""
    for t in transforms:
        if isinstance(t, list):
            resize_crops(t)
            continue
        for key in ('scale', 'size', 'second_size'):
            if t.get(key) in SIZES and 'Crop' in t.type:
                t[key] = SIZES[t[key]]
        resize_crops(t.get('transforms', []))


def fit_to_one_epoch(cfg):
    """The config's schedules cut to a 1-epoch run, so that they fit it
    (train.py refuses a scheduler or teacher ramp longer than the run):
    schedulers beginning later are dropped, the others end at epoch 1, the
    teacher's momentum ramp follows the run."""
    kept = []
    for s in cfg.param_scheduler:
        if s.get('begin', 0) >= 1:
            continue
        s.end = 1
        if 'T_max' in s:
            s.T_max = 1
        kept.append(s)
    cfg.param_scheduler = kept
    cfg.train_cfg.max_epochs = 1
    if cfg.model.get('teacher'):
        cfg.model.teacher.momentum_epochs = None


# the main ViT-B recipe, every Tab. 1 feature-target row and every
# framework of the supplementary table
PAPER_ROWS = ['hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'] + sorted(
    osp.relpath(p, osp.join(REPO, 'configs'))
    for d in ('targets', 'frameworks')
    for p in glob.glob(osp.join(REPO, 'configs', 'hpm', d, '*_in1k.py')))


@pytest.mark.parametrize('name', PAPER_ROWS)
def test_paper_row_configs_train(tmp_path, name):
    """Each of these ImageNet configs itself, only its sizes shrunk (and 2
    local crops for iBOT): its pipeline, dataloader, model, optimizer
    wrapper (AMP -> fp32 on a CPU by the precision rule),
    schedulers and hooks run 2
    iterations through tools/train.py on generated data in ImageNet's
    layout (train/<class>/, meta/train.txt). (Their collate_fn, inherited
    from mmpretrain's bases, had failed at the first batch.)"""
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    shrink(cfg.model)
    pipeline = cfg.train_dataloader.dataset.pipeline
    resize_crops(pipeline)
    for t in pipeline:
        if t.type == 'MultiView':
            t.num_views[-1] = 2
    cfg.train_dataloader.update(
        batch_size=2, num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.data_root = imagenet_folder(tmp_path, 2)
    fit_to_one_epoch(cfg)
    cfg.default_hooks.logger.interval = 1
    path = str(tmp_path / osp.basename(name))
    cfg.dump(path)
    work = str(tmp_path / 'work')
    log = train(path, work)
    # the AMP config on a CPU: the precision rule's fp32
    line = next(
        x.split(' - ')[-1] for x in log.splitlines() if ' - precision: ' in x)
    assert line.startswith('precision: fp32 (CPU: fp32'), line
    rows = [r for r in _scalars(work) if 'loss_rec' in r]
    assert len(rows) == 2 and all(
        torch.isfinite(torch.tensor(r['loss'])) for r in rows)
    learns_to_rank = cfg.model.head.get('loss_pred', 'default') is not None
    assert ('loss_pred' in rows[0]) == learns_to_rank
    assert ('loss_cls' in rows[0]) == ('ibot' in name)
    if 'ibot' in name:  # iBOT's weight decay 0.04 -> 0.4 moved by steps
        ckpt = torch.load(osp.join(work, 'epoch_1.pth'), map_location='cpu')
        wd = ckpt['param_schedulers'][-1]
        assert wd['last_step'] >= 1 and wd['eta_min'] == 0.4
        decays = {
            g['weight_decay']
            for g in ckpt['optimizer']['param_groups']
        } - {0.0}
        assert decays and all(0.04 < d <= 0.4 for d in decays), decays


def test_resume_finds_the_newest_complete_checkpoint(tmp_path):
    """No last_checkpoint, the newest file truncated: --resume takes the
    newest complete one and names what it skipped (before: 'Auto resumed
    from the latest checkpoint None', training from scratch over them)."""
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_RUN.format(keep=3, epochs=2), num_images=8)
    work = tmp_path / 'work'
    train(cfg, work)
    (work / 'last_checkpoint').unlink()
    data = (work / 'epoch_2.pth').read_bytes()
    (work / 'epoch_2.pth').write_bytes(data[:len(data) // 3])
    out = train(cfg, work, resume=True)
    assert f'resume: skipped {work}/epoch_2.pth: truncated' in out
    assert f'resume: from {work}/epoch_1.pth' in out
    assert 'resumed epoch: 1, iter: 2' in out
    # an explicit path to a broken file: one line naming it and the fix
    (work / 'epoch_3.pth').write_bytes(b'')
    with pytest.raises(HPMError) as refused:
        train(cfg, work, resume=str(work / 'epoch_3.pth'))
    assert (f'cannot resume from {work}/epoch_3.pth: empty file. '
            f'Fix: --resume {work}/epoch_2.pth, the newest complete one '
            'there.' in str(refused.value))
    with pytest.raises(HPMError) as refused:  # a folder with none
        train(cfg, work, resume=str(tmp_path / 'nowhere' / 'epoch_1.pth'))
    assert str(refused.value).endswith(
        'no such file. Fix: a complete checkpoint, or a new --work-dir.')
    # nothing complete: refuse to start from scratch over the files
    for p in work.glob('epoch_*.pth'):
        p.write_bytes(b'x' * 100)
    with pytest.raises(HPMError) as refused:
        train(cfg, work, resume=True)
    assert 'found no complete checkpoint' in str(refused.value)
    assert 'will not train from scratch over them' in str(refused.value)


# one iteration into epoch 2 the run says so in a file and waits to be
# killed (once: a run that finds the file goes on): the kill lands there on
# any machine, however fast or slow
HOLD_HOOK = '''
import os
import time
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class HoldInEpoch2(Hook):

    def __init__(self, marker):
        self.marker = marker

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if runner.epoch == 1 and not os.path.exists(self.marker):
            open(self.marker, 'w').close()
            time.sleep(3600)
'''


def test_kill_9_during_training_then_resume(tmp_path, monkeypatch):
    """SIGKILL while epoch 2 trains: --resume continues from epoch 1 with its
    step counts, and the run completes."""
    import signal
    import time
    (tmp_path / 'hold_in_epoch_2.py').write_text(HOLD_HOOK)
    marker = tmp_path / 'in_epoch_2'
    hooks = ("custom_imports = dict(imports=['hpm_mm', 'hold_in_epoch_2'], "
             'allow_failed_imports=False)\n'
             "custom_hooks = [dict(type='HPMScheduleHook'), "
             f"dict(type='HoldInEpoch2', marker={str(marker)!r})]")
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        TINY_RUN.format(keep=2, epochs=3),
        num_images=64,
        hooks=hooks)
    work = tmp_path / 'work'
    proc = subprocess.Popen(  # a process: the kill is the point
        [sys.executable, 'tools/train.py', cfg, '--work-dir',
         str(work)],
        cwd=REPO,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [str(tmp_path),
                 os.environ.get('PYTHONPATH', '')])),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # the bound only catches a hang
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, \
            'the run never reached epoch 2'
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert (work / 'epoch_1.pth').exists()
    assert not (work / 'epoch_2.pth').exists()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert 'resumed epoch: 1, iter: 16' in train(cfg, work, resume=True)
    ckpt = torch.load(work / 'epoch_3.pth', map_location='cpu')
    assert ckpt['meta']['epoch'] == 3 and ckpt['meta']['iter'] == 48


def test_a_finished_run_resumed_completes_its_missing_final_evaluation(
        tmp_path):
    """A run stopped during its end-of-training kNN and pictures (after its
    last checkpoint) and resumed trains nothing more; it runs those
    evaluations where their results are missing, and says so (it exited 0
    with no knn.json and no grids)."""
    import os
    import shutil

    from helpers import folder_loader, make_image_folder
    data = make_image_folder(str(tmp_path / 'held_out'), 2, 3)
    hooks = f'''custom_hooks = [
    dict(type='HPMScheduleHook'),
    dict(type='KNNEvalHook', ks=(1, ),
         train_dataloader={folder_loader(data)!r},
         val_dataloader={folder_loader(data)!r}),
    dict(type='HardPatchVisHook', num_images=2, num_masks=1,
         dataloader={folder_loader(data)!r})]'''
    cfg = tiny_config(
        tmp_path, body=TINY_RUN.format(keep=1, epochs=1), hooks=hooks)
    work = tmp_path / 'work'
    train(cfg, work)
    assert json.loads((work / 'knn.json').read_text())['epoch'] == 1
    # as a SIGTERM during the final evaluation leaves it
    os.remove(work / 'knn.json')
    shutil.rmtree(work / 'hard_patches')
    out = train(cfg, work, resume=True)
    assert 'resumed after its last epoch without its final evaluation' in out
    knn = json.loads((work / 'knn.json').read_text())
    assert knn['epoch'] == 1 and knn['iter'] == 4
    assert (work / 'hard_patches' / 'epoch_1_img0.png').exists()
    # a finished run with its results: nothing runs again
    assert 'without its final evaluation' not in train(cfg, work, resume=True)


@pytest.mark.parametrize(
    'change',
    ['grown folder', 'data_root', 'mask_ratio', 'weight_decay', 'none'])
def test_a_resume_knows_the_whole_run_it_continues(tmp_path, change):
    """What the checkpoint's run was, beyond its length: the iterations per
    epoch (a folder that grew: the restored cosine ended early, silently),
    the data, the mask generator, the optimizer's other hyper-parameters
    (the optimizer state brought the old weight decay back while the
    config copy claimed the new one). Each change is one line."""
    import shutil

    cfg = tiny_config(
        tmp_path, body=TINY_RUN.format(keep=1, epochs=1), num_images=8)
    work = str(tmp_path / 'work')
    train(cfg, work, quiet=True)
    options = {}
    if change == 'grown folder':
        for f in list((tmp_path / 'imgs').rglob('*.png')):
            shutil.copy(f, f.with_name('more_' + f.name))
    elif change == 'data_root':
        shutil.copytree(tmp_path / 'imgs', tmp_path / 'imgs2')
        options['train_dataloader.dataset.data_root'] = str(tmp_path / 'imgs2')
    elif change == 'mask_ratio':
        options['model.mask_generator.mask_ratio'] = 0.5
    elif change == 'weight_decay':
        options['optim_wrapper.optimizer.weight_decay'] = 0.1
    if change == 'none':
        train(cfg, work, resume=True, quiet=True)
        return
    words = dict(
        grown_folder='iterations per epoch (images / batch / processes) '
        '2 -> 4',
        data_root='train_dataloader.dataset.data_root',
        mask_ratio='model.mask_generator.mask_ratio 0.75 -> 0.5',
        weight_decay='optim_wrapper.optimizer (other than lr).weight_decay '
        '0.05 -> 0.1')[change.replace(' ', '_')]
    with pytest.raises(HPMError, match=re.escape(words)):
        train(cfg, work, resume=True, quiet=True, cfg_options=options)
    options['resume_changed_run'] = True  # continue anyway, said
    train(cfg, work, resume=True, quiet=True, cfg_options=options)


def test_a_changed_run_resumed_follows_its_new_schedule(tmp_path):
    """resume_changed_run=True after making a 1-epoch run 2 epochs long (and
    its base lr the configured one): the learning rate of the added epoch
    is the one a 2-epoch run from the start has at those iterations
    (mmengine's resume brought the checkpoint's cosine back: it had ended,
    so the added epoch trained at the minimum lr)."""
    cfg = tiny_config(
        tmp_path,
        body=TINY_RUN.format(keep=2, epochs=2) +
        'default_hooks = dict(logger=dict(interval=1))\n',
        num_images=8)
    straight, work = tmp_path / 'straight', tmp_path / 'work'
    train(cfg, straight)
    # the first run also had another base lr: the configured one is taken
    train(
        cfg,
        work,
        cfg_options={
            'train_cfg.max_epochs': 1,
            'optim_wrapper.optimizer.lr': 3e-3
        })
    train(cfg, work, resume=True, cfg_options=dict(resume_changed_run=True))
    want = [r['lr'] for r in _scalars(straight) if 'loss' in r]
    got = [r['lr'] for r in _scalars(work) if 'loss' in r]
    assert len(want) == len(got) == 4
    # (the first epoch was a 1-epoch run's; the resumed one the 2-epoch's)
    assert got[2:] == pytest.approx(want[2:], rel=1e-9, abs=0)
    assert got[2] > 10 * 1e-5  # not the cosine's minimum
    # the schedulers end as the 2-epoch run's
    ends = [
        torch.load(w / 'epoch_2.pth', map_location='cpu')['param_schedulers']
        for w in (straight, work)
    ]
    assert ends[1] == ends[0] and ends[1][-1]['end'] == 4


def test_a_changed_run_resumed_trains_as_the_new_config(tmp_path):
    """resume_changed_run=True after the batch size (iterations per epoch
    2 -> 4) and the weight decay changed: from the resumed epoch on, every
    step's lr and the optimizer's weight decay are a fresh run's of the new
    config (the refit replayed the old run's iterations as the new run's,
    and the restored optimizer kept the old weight decay); fewer epochs than
    trained is refused in one line (it logged "continuing" and trained
    nothing)."""
    cfg = tiny_config(
        tmp_path,
        body=TINY_RUN.format(keep=4, epochs=4) +
        'default_hooks = dict(logger=dict(interval=1))\n',
        num_images=8)
    new = {
        'train_dataloader.batch_size': 2,
        'optim_wrapper.optimizer.weight_decay': 0.1,
        'resume_changed_run': True
    }
    straight, work = tmp_path / 'straight', tmp_path / 'work'
    train(cfg, straight, cfg_options=new)
    old = {
        'train_cfg.max_epochs': 2,
        'train_dataloader.batch_size': 4,
        'optim_wrapper.optimizer.weight_decay': 0.05
    }
    train(cfg, work, cfg_options=old)
    with pytest.raises(HPMError) as refused:
        train(
            cfg,
            work,
            resume=True,
            cfg_options=dict(new, **{'train_cfg.max_epochs': 1}))
    assert 'it trained 2 epochs, more than train_cfg.max_epochs=1' in \
        str(refused.value) and '\n' not in str(refused.value)
    train(cfg, work, resume=True, cfg_options=new)
    want = {r['step']: r['lr'] for r in _scalars(straight) if 'loss' in r}
    got = {r['step']: r['lr'] for r in _scalars(work) if 'loss' in r}
    later = sorted(s for s in want if s > 8)  # epochs 3-4 of the new run
    assert later == list(range(9, 17)) and all(s in got for s in later), got
    assert [got[s] for s in later] == pytest.approx([want[s] for s in later],
                                                    rel=1e-9,
                                                    abs=0)
    ends = [
        torch.load(w / 'epoch_4.pth', map_location='cpu')
        for w in (straight, work)
    ]
    decays = [{g['weight_decay']
               for g in e['optimizer']['param_groups']} for e in ends]
    assert decays[0] == decays[1] == {0.0, 0.1}
    assert ends[0]['meta']['iter'] == ends[1]['meta']['iter'] == 16


def test_resume_continues_only_this_runs_checkpoints(tmp_path):
    """An epoch_3.pth of another run of the same config (another seed)
    copied beside this run's epoch_2 and last_checkpoint: --resume skips
    it with a warning naming it and continues this run's epoch 2 (it took
    the newest file and continued the other run, silently); a bare
    state_dict named as a checkpoint is one line (KeyError: 'meta')."""
    import shutil
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_RUN.format(keep=3, epochs=3), num_images=8)
    other, work = tmp_path / 'other', tmp_path / 'work'
    train(cfg, other, cfg_options={'randomness.seed': 1})
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 2})
    shutil.copy(other / 'epoch_3.pth', work / 'epoch_3.pth')
    out = train(
        cfg, work, resume=True, cfg_options={'train_cfg.max_epochs': 2})
    assert f'resume: skipped {work}/epoch_3.pth: newer than' in out and \
        'not of this run' in out, out[-3000:]
    assert f'resume: from {work}/epoch_2.pth' in out
    bare = tmp_path / 'bare' / 'epoch_9.pth'
    bare.parent.mkdir()
    torch.save(torch.load(work / 'epoch_2.pth')['state_dict'], bare)
    with pytest.raises(HPMError, match='holds no training state') as e:
        train(cfg, tmp_path / 'w2', resume=str(bare))
    assert '\n' not in str(e.value) and 'load_from=' in str(e.value)


def test_run_ids_are_compared_without_a_pointer_and_a_copy_branches(tmp_path):
    """Without a ``last_checkpoint`` pointer (a failed first write leaves
    none), another run's newer epoch is skipped too; a work dir copied to
    another path continues as a branch with its own id (its copied
    checkpoints still its start), so the original run's later checkpoint
    copied into it is not taken for its own."""
    import os
    import shutil
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_RUN.format(keep=3, epochs=3), num_images=8)
    other, work = tmp_path / 'other', tmp_path / 'work'
    train(cfg, other, cfg_options={'randomness.seed': 1})
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 1})
    (work / 'last_checkpoint').unlink()
    shutil.copy(other / 'epoch_3.pth', work / 'epoch_3.pth')
    out = train(
        cfg, work, resume=True, cfg_options={'train_cfg.max_epochs': 1})
    assert f'resume: skipped {work}/epoch_3.pth: not of this run' in out
    assert f'resume: from {work}/epoch_1.pth' in out
    os.remove(work / 'epoch_3.pth')
    copy = tmp_path / 'copy'
    shutil.copytree(work, copy)
    longer = {'train_cfg.max_epochs': 2, 'resume_changed_run': True}
    out = train(cfg, copy, resume=True, cfg_options=longer)
    assert f'resume: {copy} is a copy of {work}' in out, out[-2000:]
    own, where, parent, upto = open(copy / 'run_id').read().split()
    assert where == str(copy.resolve()) and upto == '1'
    assert parent == open(work / 'run_id').read().split()[0] != own
    train(
        cfg,
        work,
        resume=True,
        cfg_options=dict(longer, **{'train_cfg.max_epochs': 3}))
    shutil.copy(work / 'epoch_3.pth', copy / 'epoch_3.pth')  # the original's
    out = train(cfg, copy, resume=True, cfg_options=longer)
    assert 'not of this run' in out and f'resume: from {copy}/epoch_2.pth' \
        in out


def test_fewer_epochs_and_a_shallower_model_are_refused_on_resume(tmp_path):
    """resume_changed_run=True with fewer epochs than a checkpoint without a
    run signature trained: refused (it trained nothing and exited 0); a
    shallower model resumed: one line, the work dir's config copy left as
    it was (a 45-line ValueError that replaced it)."""
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_RUN.format(keep=3, epochs=2), num_images=8)
    work = tmp_path / 'work'
    train(cfg, work)
    for name in ('epoch_1.pth', 'epoch_2.pth'):  # by another runner
        ckpt = torch.load(work / name, weights_only=False)
        ckpt['meta'].pop('hpm_run')
        torch.save(ckpt, work / name)
    (work / 'run_id').unlink()
    with pytest.raises(
            HPMError,
            match='it trained 2 epochs, more than '
            'train_cfg.max_epochs=1'):
        train(
            cfg,
            work,
            resume=True,
            cfg_options={
                'train_cfg.max_epochs': 1,
                'resume_changed_run': True
            })
    deep = tmp_path / 'deep'
    train(cfg, deep, cfg_options={'model.backbone.arch.num_layers': 2})
    copy = next(deep.glob('tiny_cfg.py'))
    before = copy.read_text()
    with pytest.raises(HPMError) as e:  # the config's 1 layer
        train(cfg, deep, resume=True)
    line = str(e.value)
    assert '\n' not in line and 'tensors the model lacks' in line, line
    assert copy.read_text() == before
