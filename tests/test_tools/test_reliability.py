"""Nothing lost, nothing silent: what a failure at the end of training
keeps, on tiny generated data through tools/train.py."""
import os.path as osp
import subprocess
import sys

import pytest
import torch
from conftest import FMNIST_CFG, REPO, tiny_config

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
    proc = subprocess.run(
        [sys.executable, 'tools/train.py', cfg, '--work-dir',
         str(work)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    ckpt = work / 'epoch_1.pth'
    assert ckpt.exists() and (work / 'last_checkpoint').exists()
    assert (f'training is saved in {ckpt}. Rerun only this evaluation: '
            f'python tools/analysis_tools/knn_eval.py {cfg} {ckpt}') in out
    assert osp.getsize(ckpt) > 0


def test_runaway_learning_rate_stops_with_one_clear_error(tmp_path):
    """lr 1e6: the first step is applied, every later one is non-finite and
    skipped; after max_consecutive_skips training stops (exit != 0) instead
    of saving NaN checkpoints and exiting 0, saying how to get back."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    work = tmp_path / 'work'
    proc = subprocess.run([
        sys.executable, 'tools/train.py', cfg, '--work-dir',
        str(work), '--cfg-options', 'optim_wrapper.optimizer.lr=1e6',
        'optim_wrapper.max_consecutive_skips=3', 'train_cfg.max_epochs=4'
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert '3 optimizer steps in a row had a non-finite loss' in out
    assert 'optimizer step skipped on every rank' in out
    # the first, finite step already wrecked the weights: the message
    # does not vouch for them and points away from --resume's old lr
    assert 'checkpoint is sound' not in out and 'load_from=CKPT' in out
    for path in work.glob('epoch_*.pth'):  # whatever was saved is finite
        sd = torch.load(path, map_location='cpu')['state_dict']
        assert all(
            torch.isfinite(v).all() for v in sd.values()
            if v.is_floating_point()), path


def test_mostly_skipped_short_run_and_negative_clip_norm_fail(tmp_path):
    """A run shorter than the guard's limit of consecutive skips that
    skipped most of its steps exits non-zero naming the count, and a
    negative clipping threshold (gradient ascent) is refused before any
    step."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    proc = subprocess.run([
        sys.executable, 'tools/train.py', cfg, '--work-dir',
        str(tmp_path / 'w1'), '--cfg-options',
        'optim_wrapper.optimizer.lr=1e6', 'train_cfg.max_epochs=3'
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert 'optimizer steps were skipped' in out.splitlines()[-1], out[-2000:]
    proc = subprocess.run([
        sys.executable, 'tools/train.py', cfg, '--work-dir',
        str(tmp_path / 'w2'), '--cfg-options',
        'optim_wrapper.clip_grad.max_norm=-1'
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
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
    runs = [
        (['tools/train.py', str(broken)], 'broken.py, line 2'),
        (typo, "did you mean 'max_keep_ckpts'"),
        ([
            'tools/train.py',
            tiny_config(
                other_dir,
                FMNIST_CFG,
                num_images=8,
                body='model = dict(neck=dict(decoder_embed_dim=64))'),
            '--work-dir',
            str(tmp_path / 'w'), '--resume', hpm_checkpoint
        ], 'the config changed since the checkpoint was written'),
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
        proc = subprocess.run([sys.executable, *args],
                              cwd=REPO,
                              capture_output=True,
                              text=True,
                              timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, (args, out[-2000:])
        assert says in out.strip().splitlines()[-1], (args, out[-2000:])
    assert not list((tmp_path / 'w').glob('epoch_*.pth'))


def test_test_tool_refuses_a_checkpoint_that_does_not_fill_the_model(
        tmp_path, hpm_checkpoint):
    """A pretraining checkpoint (no classifier head) or a file of random
    tensors is not evaluated as a random model: one line, exit != 0, unless
    --partial-load."""
    from conftest import make_image_folder
    from test_benchmarks import LINEAR, _folder_loader
    data = make_image_folder(str(tmp_path / 'val'), 2, 2)
    cfg = tmp_path / 'linear.py'
    cfg.write_text(f'''
_base_ = [{LINEAR!r}]
model = dict(backbone=dict(init_cfg=None))
test_dataloader = {dict(_delete_=True, **_folder_loader(data))!r}
''')
    random = tmp_path / 'random.pth'
    torch.save(dict(state_dict={'a': torch.randn(3)}), random)
    for ckpt in (hpm_checkpoint, str(random)):
        proc = subprocess.run([
            sys.executable, 'tools/test.py',
            str(cfg), ckpt, '--work-dir',
            str(tmp_path / 'work')
        ],
                              cwd=REPO,
                              capture_output=True,
                              text=True,
                              timeout=600)
        assert proc.returncode != 0
        lines = [
            ln for ln in proc.stderr.splitlines()
            if ln.startswith('tools/test.py:')
        ]
        assert len(lines) == 1, proc.stderr[-2000:]
        assert f'{ckpt} does not fill the model' in lines[0]
        assert 'head.fc.weight' in lines[0] or 'missing' in lines[0]
        assert '--partial-load' in lines[0]
    proc = subprocess.run([
        sys.executable, 'tools/test.py',
        str(cfg), hpm_checkpoint, '--work-dir',
        str(tmp_path / 'work'), '--partial-load'
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'accuracy/top1' in proc.stdout + proc.stderr


TINY = '''
model = dict(
    backbone=dict(arch=dict(embed_dims=16, num_layers=1, num_heads=2,
                            feedforward_channels=32)),
    neck=dict(embed_dim=16, decoder_embed_dim=8, decoder_depth=1,
              decoder_num_heads=2))
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts={keep}))
train_cfg = dict(max_epochs={epochs})
'''
# Kill the process (as kill -9 would: no cleanup, no exception) halfway
# through writing the checkpoint of epoch 2.
KILL_IN_SAVE = '''
import io
import os

import torch
import mmengine.runner.runner as runner_module

_save = runner_module.save_checkpoint


def save_then_die(checkpoint, filename, *args, **kwargs):
    if 'epoch_2' in filename:
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        with open(filename, 'wb') as f:
            f.write(buf.getvalue()[:len(buf.getvalue()) // 2])
        os._exit(137)
    return _save(checkpoint, filename, *args, **kwargs)


runner_module.save_checkpoint = save_then_die
'''


def _train(cfg, work, *args, env=None, check=True):
    import os
    proc = subprocess.run([
        sys.executable, 'tools/train.py', cfg, '--work-dir',
        str(work), *args
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600,
                          env=dict(os.environ, **(env or {})))
    if check:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc, proc.stdout + proc.stderr


def test_kill_during_a_save_keeps_the_previous_checkpoint(tmp_path):
    """max_keep_ckpts=1 and a kill halfway through writing epoch 2: epoch 1
    is still on disk and named by last_checkpoint (mmengine deleted it
    before writing the new file, in place); --resume continues from it."""
    (tmp_path / 'kill_in_save.py').write_text(KILL_IN_SAVE)
    body = TINY.format(
        keep=1, epochs=2) + (
            "custom_imports = dict(imports=['hpm_mm', 'kill_in_save'], "
            'allow_failed_imports=False)\n')
    cfg = tiny_config(tmp_path, FMNIST_CFG, body, num_images=8)
    work = tmp_path / 'work'
    proc, out = _train(
        cfg, work, env=dict(PYTHONPATH=str(tmp_path)), check=False)
    assert proc.returncode == 137, out[-3000:]
    assert not (work / 'epoch_2.pth').exists()
    assert (work / 'epoch_2.pth.tmp').exists()  # the half-written file
    assert (work / 'last_checkpoint').read_text() == str(work / 'epoch_1.pth')
    from hpm_mm.utils import checkpoint_problem
    assert checkpoint_problem(str(work / 'epoch_1.pth')) is None
    (tmp_path / 'kill_in_save.py').write_text('')  # no more kills
    _, out = _train(cfg, work, '--resume', env=dict(PYTHONPATH=str(tmp_path)))
    assert 'resumed epoch: 1, iter: 2' in out
    assert checkpoint_problem(str(work / 'epoch_2.pth')) is None
    assert not (work / 'epoch_1.pth').exists()  # rotated out after epoch 2


def test_resume_finds_the_newest_complete_checkpoint(tmp_path):
    """No last_checkpoint, the newest file truncated: --resume takes the
    newest complete one and names what it skipped (before: 'Auto resumed
    from the latest checkpoint None', training from scratch over them)."""
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY.format(keep=3, epochs=3), num_images=8)
    work = tmp_path / 'work'
    _train(cfg, work, '--cfg-options', 'train_cfg.max_epochs=2')
    (work / 'last_checkpoint').unlink()
    data = (work / 'epoch_2.pth').read_bytes()
    (work / 'epoch_2.pth').write_bytes(data[:len(data) // 3])
    _, out = _train(cfg, work, '--resume')
    assert f'resume: skipped {work}/epoch_2.pth: truncated' in out
    assert f'resume: from {work}/epoch_1.pth' in out
    assert 'resumed epoch: 1, iter: 2' in out
    # an explicit path to a broken file: one line naming it and the fix
    (work / 'epoch_3.pth').write_bytes(b'')
    proc, out = _train(
        cfg, work, '--resume', str(work / 'epoch_3.pth'), check=False)
    assert proc.returncode != 0
    assert (f'train.py: cannot resume from {work}/epoch_3.pth: empty file. '
            f'The newest complete one there: --resume {work}/epoch_2.pth'
            in out)
    # nothing complete: refuse to start from scratch over the files
    for p in work.glob('epoch_*.pth'):
        p.write_bytes(b'x' * 100)
    proc, out = _train(cfg, work, '--resume', check=False)
    assert proc.returncode != 0
    assert 'found no complete checkpoint' in out
    assert 'will not train from scratch over them' in out


def _train_main(*argv):
    sys.path.insert(0, osp.join(REPO, 'tools'))
    try:
        import train
        return train.main(list(argv))
    finally:
        sys.path.pop(0)


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
            _train_main(FMNIST_CFG, '--cfg-options', option)
    with pytest.raises(SystemExit):
        _train_main(FMNIST_CFG, '--cfg-options', 'train_cfg.max_epochs')
    err = capsys.readouterr().err
    assert "'train_cfg.max_epochs': expected key=value" in err
    # mmengine's parser recursed without end on dict(...) values
    with pytest.raises(SystemExit):
        _train_main(FMNIST_CFG, '--cfg-options',
                    "custom_hooks=[dict(type='HPMScheduleHook')]")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert 'values cannot be dict(...) here. Fix:' in err


def test_missing_dataset_gives_the_real_fix(tmp_path, monkeypatch):
    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as e:
        FashionMNISTSplit(data_root='data/not_prepared/', split='test')
    msg = str(e.value)
    where = osp.join(str(tmp_path), 'data', 'not_prepared')
    assert f'Fashion-MNIST is not in {where}' in msg
    assert f'working directory {tmp_path}, then in the checkout {REPO}' \
        in msg
    assert 'prepare_fashion_mnist.py --out' in msg
    assert 'download=True' not in msg
    assert not (tmp_path / 'data').exists()  # nothing left behind


def test_configs_find_the_embedded_data_from_any_folder(tmp_path, monkeypatch):
    """The configs' relative data_root resolves in the checkout when the
    working directory has no data/ (issue #30)."""
    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    if not osp.exists(osp.join(REPO, 'data', 'fashion_mnist')):
        pytest.skip('the embedded data is not prepared in this checkout')
    monkeypatch.chdir(tmp_path)
    ds = FashionMNISTSplit(data_root='data/fashion_mnist/', split='test')
    assert len(ds) == 10000
    assert ds.data_prefix['root'] == osp.join(REPO, 'data', 'fashion_mnist/')


def test_dist_launchers_use_the_project_environment(tmp_path):
    """Not `python` from PATH (a fresh shell often has none with torch),
    but the environment tools/install.sh made."""
    import os
    import stat
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    fake = venv / 'bin' / 'python'
    fake.write_text('#!/bin/sh\necho "venv python: $@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    wrong = tmp_path / 'path'
    wrong.mkdir()
    (wrong / 'python').write_text('#!/bin/sh\necho "PATH python"\nexit 3\n')
    (wrong / 'python').chmod(0o755)
    env = dict(
        os.environ,
        HPM_VENV=str(venv),
        PATH=f'{wrong}{os.pathsep}{os.environ["PATH"]}')
    env.pop('PYTHON', None)
    for script, args in (('dist_train.sh', ['cfg.py', '2']),
                         ('dist_test.sh', ['cfg.py', 'ckpt.pth', '2'])):
        out = subprocess.run(['bash', f'tools/{script}', *args],
                             cwd=REPO,
                             env=env,
                             capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith('venv python: -m torch.distributed.run')


def test_kill_9_during_training_then_resume(tmp_path):
    """SIGKILL while epoch 2 trains: --resume continues from epoch 1 with its
    step counts, and the run completes."""
    import signal
    import time
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY.format(keep=2, epochs=3), num_images=64)
    work = tmp_path / 'work'
    proc = subprocess.Popen(
        [sys.executable, 'tools/train.py', cfg, '--work-dir',
         str(work)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (work / 'epoch_1.pth').exists() and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (work / 'epoch_3.pth').exists()
    _, out = _train(cfg, work, '--resume')
    assert 'resumed epoch: ' in out
    ckpt = torch.load(work / 'epoch_3.pth', map_location='cpu')
    assert ckpt['meta']['epoch'] == 3 and ckpt['meta']['iter'] == 48


def _folder_config(tmp_path, data, color='grayscale', skip=False):
    cfg = tmp_path / f'folder_{color}_{skip}.py'
    cfg.write_text(f'''
_base_ = [{FMNIST_CFG!r}]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root={data!r},
                 with_label=False, pipeline=[
                     dict(type='LoadImageFromFileChecked',
                          color_type={color!r}, skip_unreadable={skip}),
                     dict(type='Resize', scale=28),
                     dict(type='PackInputs')]))
custom_hooks = [dict(type='HPMScheduleHook')]
train_cfg = dict(max_epochs=1)
''')
    return str(cfg)


def test_unreadable_image_named_or_skipped_and_checked_before(tmp_path):
    """A 0-byte PNG: training stops naming the file (mmcv's error named
    none), or, opted in, skips it and logs the count; the pre-flight check
    lists it before any training."""
    from conftest import make_image_folder
    data = make_image_folder(str(tmp_path / 'imgs'), 2, 4)
    bad = osp.join(data, 'class_1', 'broken.png')
    open(bad, 'wb').close()
    cut = osp.join(data, 'class_0', 'cut.png')  # a PNG cut short
    with open(osp.join(data, 'class_0', '000.png'), 'rb') as f:
        head = f.read()[:60]
    with open(cut, 'wb') as f:
        f.write(head)
    proc, out = _train(
        _folder_config(tmp_path, data), tmp_path / 'w1', check=False)
    assert proc.returncode != 0
    assert (f'cannot read image {bad}' in out
            or f'cannot read image {cut}' in out) and 'skip_unreadable' in out
    _, out = _train(
        _folder_config(tmp_path, data, skip=True), tmp_path / 'w2',
        '--cfg-options', 'train_cfg.max_epochs=3')
    assert f'skipped unreadable image {bad}' in out
    assert f'skipped unreadable image {cut}' in out
    assert (tmp_path / 'w2' / 'epoch_3.pth').exists()
    check = subprocess.run([
        sys.executable, 'tools/misc/check_data.py',
        _folder_config(tmp_path, data)
    ],
                           cwd=REPO,
                           capture_output=True,
                           text=True,
                           timeout=300)
    assert check.returncode == 1
    assert f'PROBLEM train_dataloader: unreadable image {bad}' in check.stdout
    assert f'PROBLEM train_dataloader: unreadable image {cut}' in check.stdout
    assert '10 image files checked, 2 unreadable (L: 8)' in check.stdout
    proc, out = _train(
        _folder_config(tmp_path, data),
        tmp_path / 'w3',
        '--check-data',
        check=False)
    assert proc.returncode != 0 and f'unreadable image {cut}' in out
    assert not (tmp_path / 'w3' / 'epoch_1.pth').exists()


def test_channel_mismatch_is_one_line_naming_both(tmp_path):
    import pytest
    from conftest import make_image_folder

    from hpm_mm.models import ChannelCheckedDataPreprocessor
    gray_model = ChannelCheckedDataPreprocessor(mean=[0.], std=[1.])
    rgb_model = ChannelCheckedDataPreprocessor(
        mean=[0.] * 3, std=[1.] * 3, to_rgb=True)
    with pytest.raises(
            ValueError, match=r'3 channel\(s\) but the model '
            r'takes 1'):
        gray_model(dict(inputs=torch.zeros(2, 3, 8, 8)))
    with pytest.raises(
            ValueError,
            match=r'1 channel\(s\) but the model '
            r'takes 3.*color_type=.color'):
        rgb_model(dict(inputs=[torch.zeros(1, 8, 8)]))
    # RGB files loaded as colour into the grayscale main-job model
    data = make_image_folder(str(tmp_path / 'rgb'), 1, 4, gray=False)
    cfg = _folder_config(tmp_path, data, color='color')
    check = subprocess.run([sys.executable, 'tools/misc/check_data.py', cfg],
                           cwd=REPO,
                           capture_output=True,
                           text=True,
                           timeout=300)
    assert check.returncode == 1
    assert ('the pipeline loads 3-channel images but the model takes 1'
            in check.stdout)
    proc, out = _train(cfg, tmp_path / 'w', check=False)
    assert proc.returncode != 0
    assert 'the images have 3 channel(s) but the model takes 1' in out


@pytest.mark.parametrize('module',
                         ['numpy.core.multiarray', 'numpy._core.multiarray'])
def test_numpy_in_a_checkpoint_loads_from_either_numpy(tmp_path, module):
    """mmengine's buffers pickle NumPy arrays and scalars, named by the
    module of the NumPy that wrote them (``numpy.core`` in 1.x,
    ``numpy._core`` in 2.x). Both names load with ``weights_only=True``:
    a checkpoint written here (NumPy 1) resumes on a GPU image with NumPy
    2 and the other way round; nothing else is allowed on the way."""
    import pickle

    import numpy as np
    obj = dict(arr=np.arange(3.), scalar=np.float64(2.5))
    path = tmp_path / 'ckpt.pth'
    # torch's legacy format: a protocol-2 pickle whose GLOBAL opcodes name
    # 'module\nname\n' in plain bytes, renamed here to ``module``
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    raw = path.read_bytes()
    for written in (b'numpy.core.multiarray', b'numpy._core.multiarray'):
        raw = raw.replace(written + b'\n', module.encode() + b'\n')
    assert module.encode() + b'\n_reconstruct' in raw
    path.write_bytes(raw)
    got = torch.load(path, weights_only=True)
    assert np.array_equal(got['arr'], obj['arr'])
    assert got['scalar'] == 2.5
    # the allow-list stays narrow: another NumPy global is refused
    torch.save(dict(f=np.save), path, _use_new_zipfile_serialization=False)
    with pytest.raises(pickle.UnpicklingError, match='Unsupported global'):
        torch.load(path, weights_only=True)
