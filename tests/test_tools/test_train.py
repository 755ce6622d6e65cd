"""tools/train.py: what a failure keeps, what is refused before any work, and
the one-line errors of bad options."""
import os.path as osp

import torch
from conftest import FMNIST_CFG, python, tiny_config, train_main

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)

BROKEN_KNN = '''
custom_hooks = [
    dict(type='HPMScheduleHook'),
    dict(type='KNNEvalHook',
         train_dataloader=dict(
             batch_size=4, num_workers=0,
             sampler=dict(type='DefaultSampler', shuffle=False),
             collate_fn=dict(type='default_collate'),
             dataset=dict(type='CustomDataset', data_root={root!r},
                          pipeline=[dict(type='PackInputs')])),
         val_dataloader=dict(
             batch_size=4, num_workers=0,
             sampler=dict(type='DefaultSampler', shuffle=False),
             collate_fn=dict(type='default_collate'),
             dataset=dict(type='CustomDataset', data_root={root!r},
                          pipeline=[dict(type='PackInputs')])))]
train_cfg = dict(max_epochs=1)
'''


def test_evaluation_failure_after_training_keeps_the_checkpoint(tmp_path):
    """A kNN data path that is only found wrong after training: the final
    checkpoint is already on disk, and the error says how to rerun only the
    evaluation."""
    missing = str(tmp_path / 'no_such_knn_data')
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        BROKEN_KNN.format(root=missing),
        num_images=8,
        hooks='')
    work = tmp_path / 'work'
    proc = python('tools/train.py', cfg, '--work-dir', str(work))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    ckpt = work / 'epoch_1.pth'
    assert ckpt.exists() and (work / 'last_checkpoint').exists()
    assert (f'training is saved in {ckpt}. Rerun only this evaluation: '
            f'python tools/analysis_tools/knn_eval.py {cfg} {ckpt}') in out
    assert osp.getsize(ckpt) > 0


def test_mostly_skipped_short_run_and_negative_clip_norm_fail(tmp_path):
    """A run shorter than the guard's limit of consecutive skips that
    skipped most of its steps exits non-zero naming the count, and a
    negative clipping threshold (gradient ascent) is refused before any
    step."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    proc = python('tools/train.py', cfg, '--work-dir', str(tmp_path / 'w1'),
                  '--cfg-options', 'optim_wrapper.optimizer.lr=1e6',
                  'train_cfg.max_epochs=3')
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert 'optimizer steps were skipped' in out.splitlines()[-1], out[-2000:]
    proc = python('tools/train.py', cfg, '--work-dir', str(tmp_path / 'w2'),
                  '--cfg-options', 'optim_wrapper.clip_grad.max_norm=-1')
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and 'clip_grad.max_norm=-1 is not a ' \
        'positive number' in out, out[-2000:]
    assert not list((tmp_path / 'w2').glob('epoch_*.pth'))


def test_what_cannot_be_judged_is_refused_before_work(tmp_path,
                                                      hpm_checkpoint):
    """Each refused in one line, non-zero exit, before any training or
    evaluation: load_from a checkpoint of another architecture (it would
    load nothing and train from scratch), a checkpoint with NaN weights
    evaluated by kNN or tools/test.py (chance accuracy, not an error), the
    hard-patch pictures of a checkpoint without a loss predictor (a random
    one's scores), test.py --out in an unknown format or a missing
    folder, a config with a syntax error (its file and line), a typo in a
    hook option (before the first epoch, not at the first save), and
    --resume after the architecture changed."""
    other = osp.join(
        osp.dirname(osp.dirname(__file__)), 'data',
        'hpm_tiny_v0_epoch_1.pth')  # 16-d, 32 px
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    nan = tmp_path / 'nan.pth'
    ckpt = torch.load(hpm_checkpoint, map_location='cpu')
    next(v for k, v in ckpt['state_dict'].items()
         if k.startswith('backbone.'))[...] = float('nan')
    torch.save(ckpt, nan)
    no_predictor = tmp_path / 'mae_like.pth'
    ckpt = torch.load(hpm_checkpoint, map_location='cpu')
    ckpt['state_dict'] = {
        k: v
        for k, v in ckpt['state_dict'].items() if 'predictor' not in k
    }
    torch.save(ckpt, no_predictor)
    other_dir = tmp_path / 'changed'
    other_dir.mkdir()
    typo = [
        'tools/train.py', cfg, '--work-dir',
        str(tmp_path / 'w'), '--cfg-options',
        'default_hooks.checkpoint.max_keep_ckpt=1'
    ]
    broken = tmp_path / 'broken.py'
    broken.write_text(f"_base_ = [{FMNIST_CFG!r}]\nmodel = dict(\n"
                      "    neck=dict(embed_dim=16)\n")
    child = tmp_path / 'child.py'  # the error in the base it inherits
    child.write_text("_base_ = ['broken.py']\n")
    runs = [
        (['tools/train.py', str(broken)], 'broken.py, line 2'),
        (['tools/misc/check_data.py', str(broken)], 'broken.py, line 2'),
        (['tools/train.py', str(child)],
         f'broken.py, line 2: \'(\' was never closed: model = dict( '
         f'(inherited by {child})'),
        (typo, "did you mean 'max_keep_ckpts'"),
        (
            [
                'tools/train.py',
                tiny_config(
                    other_dir,
                    FMNIST_CFG,
                    num_images=8,
                    # the checkpoint's run (1 epoch), another decoder
                    body='model = dict(neck=dict(decoder_embed_dim=64))\n'
                    'train_cfg = dict(max_epochs=1)'),
                '--work-dir',
                str(tmp_path / 'w'),
                '--resume',
                hpm_checkpoint,
                # its data root differs too: continue past that refusal
                '--cfg-options',
                'resume_changed_run=True'
            ],
            'the config changed since the checkpoint was written'),
        ([
            'tools/analysis_tools/visualize_hard_patches.py', FMNIST_CFG,
            str(no_predictor), '--out-dir',
            str(tmp_path / 'vis')
        ], 'need its trained loss predictor'),
        ([
            'tools/train.py', cfg, '--work-dir',
            str(tmp_path / 'w'), '--cfg-options', f'load_from={other}'
        ], 'of another architecture'),
        (['tools/analysis_tools/knn_eval.py', FMNIST_CFG,
          str(nan)], 'holds non-finite values'),
        ([
            'tools/test.py', cfg,
            str(nan), '--work-dir',
            str(tmp_path / 't'), '--partial-load', '--out',
            str(tmp_path / 'r.txt')
        ], 'unknown format .txt'),
        ([
            'tools/test.py', cfg,
            str(nan), '--work-dir',
            str(tmp_path / 't'), '--partial-load', '--out',
            str(tmp_path / 'no' / 'r.json')
        ], 'does not exist'),
    ]
    for args, says in runs:
        proc = python(*args)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, (args, out[-2000:])
        assert says in out.strip().splitlines()[-1], (args, out[-2000:])
    assert not list((tmp_path / 'w').glob('epoch_*.pth'))


def test_bad_cfg_options_name_the_key_and_the_type(capsys):
    import pytest
    cases = [('train_cfg.max_epochs=abc', "train_cfg.max_epochs='abc': "
              'expected a whole number (the config has 10)'),
             ('optim_wrapper.optimizer.lr=fast', "optim_wrapper.optimizer."
              "lr='fast': expected a number (the config has 0.0015)"),
             ('train_dataloader.persistent_workers=2', 'expected True or '
              'False')]
    for option, message in cases:
        with pytest.raises(
                SystemExit, match=message.replace('(',
                                                  r'\(').replace(')', r'\)')):
            train_main(FMNIST_CFG, '--cfg-options', option)
    with pytest.raises(SystemExit):
        train_main(FMNIST_CFG, '--cfg-options', 'train_cfg.max_epochs')
    err = capsys.readouterr().err
    assert "'train_cfg.max_epochs': expected key=value" in err
    # mmengine's parser recursed without end on dict(...) values
    with pytest.raises(SystemExit):
        train_main(FMNIST_CFG, '--cfg-options',
                   "custom_hooks=[dict(type='HPMScheduleHook')]")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert 'values cannot be dict(...) here. Fix:' in err
