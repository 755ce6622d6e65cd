"""Training (hpm_mm.apis, tools/train.py): what a failure keeps, what is
refused before any work, and the one-line errors of bad options."""
import os.path as osp

import pytest
import torch
from helpers import FMNIST_CFG, tiny_config, tool_main, train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.errors import HPMError

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
    """A kNN pipeline that is only found wrong after training (it loads no
    image): the final checkpoint is already on disk, and the error says how
    to rerun only the evaluation. A kNN folder that does not exist is
    refused before training, in one line."""
    from helpers import make_image_folder

    def knn_on(root):
        return tiny_config(
            tmp_path,
            FMNIST_CFG,
            BROKEN_KNN.format(root=root),
            num_images=8,
            hooks='')

    missing = str(tmp_path / 'no_such_knn_data')
    cfg = knn_on(missing)
    with pytest.raises(
            HPMError,
            match="KNNEvalHook.train_dataloader.dataset"
            f".data_root '{missing}' is not a folder"):
        train(cfg, tmp_path / 'w0')
    assert not (tmp_path / 'w0').exists()
    cfg = knn_on(make_image_folder(str(tmp_path / 'knn'), 2, 2))
    work = tmp_path / 'work'
    with pytest.raises(ValueError):  # no image loaded: no (H, W) to read
        train(cfg, work)
    out = open(next(work.glob('*/*.log'))).read()  # the run's log
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
    with pytest.raises(HPMError, match='optimizer steps were skipped'):
        train(
            cfg,
            tmp_path / 'w1',
            cfg_options={
                'optim_wrapper.optimizer.lr': 1e6,
                'train_cfg.max_epochs': 3
            })
    with pytest.raises(
            HPMError, match='clip_grad.max_norm=-1 is not a '
            'positive number'):
        train(
            cfg,
            tmp_path / 'w2',
            cfg_options={'optim_wrapper.clip_grad.max_norm': -1})
    assert not list((tmp_path / 'w2').glob('epoch_*.pth'))


def test_a_resumed_run_counts_its_steps_before_the_stop(tmp_path):
    """The guard's end-of-run check counts the whole run: 4 steps applied
    before a stop, then a resumed epoch (lr 1e6) that skips a step ends
    normally; counting the resumed process's steps alone (1 of 2 skipped)
    it failed. Each checkpoint's meta keeps the counts."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    work = tmp_path / 'w'
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 2})
    run = torch.load(work / 'epoch_2.pth', map_location='cpu')['meta']
    assert run['hpm_run']['steps'] == [0, 4]
    assert run['hpm_run']['last_applied'] == 1.0
    log = train(
        cfg,
        work,
        resume=True,
        cfg_options={
            'train_cfg.max_epochs': 3,
            'optim_wrapper.optimizer.lr': 1e6,
            'resume_changed_run': True
        })
    assert 'optimizer step skipped' in log
    run = torch.load(work / 'epoch_3.pth', map_location='cpu')['meta']
    assert run['hpm_run']['steps'] == [1, 5]


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
    broken = tmp_path / 'broken.py'
    broken.write_text(f"_base_ = [{FMNIST_CFG!r}]\nmodel = dict(\n"
                      "    neck=dict(embed_dim=16)\n")
    child = tmp_path / 'child.py'  # the error in the base it inherits
    child.write_text("_base_ = ['broken.py']\n")
    from hpm_mm.apis import hard_patches, knn_eval, test
    w, t = str(tmp_path / 'w'), str(tmp_path / 't')
    changed = tiny_config(
        other_dir,
        FMNIST_CFG,
        num_images=8,
        # the checkpoint's run (1 epoch), another decoder
        body='model = dict(neck=dict(decoder_embed_dim=64))\n'
        'train_cfg = dict(max_epochs=1)')
    runs = [
        (lambda: train(broken, w), 'broken.py, line 2'),
        (lambda: train(child, w),
         f'broken.py, line 2: \'(\' was never closed: model = dict( '
         f'(inherited by {child})'),
        (lambda: train(
            cfg, w, cfg_options={'default_hooks.checkpoint.max_keep_ckpt': 1}),
         "'max_keep_ckpt' (did you mean max_keep_ckpts?)"),
        # its data root differs too: continue past that refusal
        (lambda: train(
            changed,
            w,
            resume=hpm_checkpoint,
            cfg_options=dict(resume_changed_run=True)),
         'the config changed since the checkpoint was written'),
        (lambda: hard_patches(FMNIST_CFG, str(no_predictor),
                              str(tmp_path / 'vis')),
         'need its trained loss predictor'),
        (lambda: train(cfg, w, cfg_options=dict(load_from=other)),
         'of another architecture'),
        (lambda: knn_eval(FMNIST_CFG, str(nan)), 'holds non-finite values'),
        # load_from of it: refused at the start in kNN's line (it trained an
        # epoch and blamed the learning rate)
        (lambda: train(cfg, w, cfg_options=dict(load_from=str(nan))),
         f'load_from={nan} holds non-finite values'),
        (lambda: test(
            cfg, str(nan), t, partial_load=True, out=str(tmp_path / 'r.txt')),
         'unknown format .txt'),
        (lambda: test(
            cfg,
            str(nan),
            t,
            partial_load=True,
            out=str(tmp_path / 'no' / 'r.json')), 'does not exist'),
    ]
    for run, says in runs:
        with pytest.raises(HPMError) as refused:
            run()
        assert says in str(refused.value) and '\n' not in str(
            refused.value), (says, refused.value)
    assert not list((tmp_path / 'w').glob('epoch_*.pth'))


def test_bad_cfg_options_name_the_key_and_the_type():
    cases = [('train_cfg.max_epochs=abc', "train_cfg.max_epochs='abc': "
              'expected a whole number (the config has 10)'),
             ('optim_wrapper.optimizer.lr=fast', "optim_wrapper.optimizer."
              "lr='fast': expected a number (the config has 0.0015)"),
             ('train_dataloader.persistent_workers=2', 'expected True or '
              'False')]
    for option, message in cases:
        proc = tool_main('train.py', FMNIST_CFG, '--cfg-options', option)
        assert proc.returncode == 1
        assert message in proc.stderr.strip().splitlines()[-1]
    proc = tool_main('train.py', FMNIST_CFG, '--cfg-options',
                     'train_cfg.max_epochs')
    assert proc.returncode == 2
    err = proc.stderr
    assert "'train_cfg.max_epochs': expected key=value" in err
    # mmengine's parser recursed without end on dict(...) values
    proc = tool_main('train.py', FMNIST_CFG, '--cfg-options',
                     "custom_hooks=[dict(type='HPMScheduleHook')]")
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()[-1]
    assert 'values cannot be dict(...) here. Fix:' in err


def test_a_misspelt_score_source_is_refused_before_any_file(tmp_path):
    """One line listing the registered sources, before the work dir or its
    log folder exists (a ValueError in 21 frames after the log folder was
    made)."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    with pytest.raises(
            HPMError,
            match="score_source 'predicted_los' is "
            'not a registered teacher score source'):
        train(
            cfg,
            tmp_path / 'w',
            cfg_options={'model.teacher.score_source': 'predicted_los'})
    assert not (tmp_path / 'w').exists()


def test_a_work_dir_inside_the_training_folder_is_refused(tmp_path):
    """Its pictures would be the next run's training images: one line,
    nothing written."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    work = tmp_path / 'imgs' / 'runs' / 'a'
    with pytest.raises(HPMError, match='is inside the training images'):
        train(cfg, work)
    assert not (tmp_path / 'imgs' / 'runs').exists()


def test_loud_but_raw_inputs_are_one_line(tmp_path, monkeypatch, capsys):
    """Issue #63's list, each one line naming the file or value and the
    fix (each was a raw traceback or a wrong "did you mean"): a folder as
    the config or as load_from; a work dir that cannot be made (under a
    file; a read-only current folder without --work-dir); a missing
    checkpoint for kNN, the pictures and a converter; a converter
    destination that is a folder; a 1-long mean for a 3-channel model."""
    import os
    import stat

    from hpm_mm.apis import hard_patches, knn_eval
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    (tmp_path / 'dir').mkdir()
    (tmp_path / 'file').write_text('x')
    checks = [
        (lambda: train(str(tmp_path / 'dir'), tmp_path / 'w'), 'a folder'),
        (lambda: train(
            cfg,
            tmp_path / 'w1',
            cfg_options=dict(load_from=str(tmp_path / 'dir'))), 'a folder'),
        (lambda: train(cfg, tmp_path / 'file' / 'w'), 'cannot make the work'),
        (lambda: knn_eval(FMNIST_CFG, str(tmp_path / 'no.pth')),
         'no such file'),
        (lambda: hard_patches(FMNIST_CFG, str(tmp_path / 'no.pth'),
                              str(tmp_path / 'p')), 'no such file'),
        (lambda: train(
            cfg,
            tmp_path / 'w2',
            cfg_options={
                'model.data_preprocessor.mean': [0.5],
                'model.data_preprocessor.std': [0.5],
                'model.backbone.patch_cfg.in_channels': 3
            }), '1 value'),
    ]
    for run, words in checks:
        with pytest.raises(HPMError, match=words) as refused:
            run()
        assert '\n' not in str(refused.value)
    for args in ([
            'model_converters/hpm2backbone.py', tmp_path / 'no.pth',
            tmp_path / 'o.pth', '--target', 'mmpretrain'
    ], [
            'model_converters/hpm2backbone.py', tmp_path / 'no.pth',
            tmp_path / 'dir', '--target', 'mmpretrain'
    ]):
        proc = tool_main(*args)
        assert proc.returncode == 1 and len(
            proc.stderr.strip().splitlines()) == 1, proc.stderr
    readonly = tmp_path / 'ro'
    readonly.mkdir()
    monkeypatch.chdir(readonly)
    os.chmod(readonly, stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setattr(os, 'makedirs', lambda *a, **k: (_ for _ in ()).throw(
        PermissionError(13, 'Permission denied')))  # (root writes anyway)
    try:
        from hpm_mm.apis import train as api_train
        with pytest.raises(HPMError, match='cannot make the work dir'):
            api_train(cfg)  # no --work-dir: work_dirs/ of the cwd
    finally:
        os.chmod(readonly, stat.S_IRWXU)


def test_amp_over_a_precision_key_says_so_and_load_from_keeps_spaces(
        tmp_path, hpm_checkpoint):
    """--amp and an explicit precision key: the command line wins, with a
    warning naming both (it won silently); a load_from path with a space
    reaches the run (mmengine's option parser deleted the space)."""
    import shutil
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        num_images=8,
        body="precision = 'bf16'\ntrain_cfg = dict(max_epochs=1)")
    spaced = tmp_path / 'a b' / 'c d.pth'
    spaced.parent.mkdir()
    shutil.copy(hpm_checkpoint, spaced)
    from helpers import process  # a process: the console is the point
    proc = process('tools/train.py', cfg, '--work-dir', tmp_path / 'w',
                   '--amp', '--cfg-options', f'load_from={spaced}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "--amp sets precision='auto' over the config's " \
        "precision='bf16'" in out
    assert f'Load checkpoint from {spaced}' in out, out[-3000:]
