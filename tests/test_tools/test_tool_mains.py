"""Each tool's ``main(argv)``: its arguments reach the library function as
the documented keywords, what it prints and writes from the result, and its
exit codes (0; 1 with the library's refusal as one line on stderr, named
by the tool; 2 for an argument argparse refuses). The library functions
are replaced by recorders here: what they do is tested through
:mod:`hpm_mm.apis` elsewhere."""
import json

import pytest
from helpers import FMNIST_CFG, tool_main
from mmengine.config import Config

import hpm_mm.apis as apis
from hpm_mm.errors import HPMError


class Recorder:
    """Stands in for a library function: records each call's arguments and
    returns ``result`` (or raises it, when it is an exception)."""

    def __init__(self, result=None):
        self.result, self.calls = result, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


class FakeRunner:
    trained = 0

    def train(self):
        FakeRunner.trained += 1


@pytest.fixture
def record(monkeypatch):
    """``record(name, result)``: ``hpm_mm.apis.<name>`` replaced by a
    :class:`Recorder` (the tools import it at call time)."""

    def replace(name, result=None, module=apis):
        recorder = Recorder(result)
        monkeypatch.setattr(module, name, recorder)
        return recorder

    return replace


def test_train_maps_every_option(record):
    cfg = Config(dict(train_dataloader=dict(), val_dataloader=dict()))
    made = record('train_config', cfg)
    record('build_runner', FakeRunner())
    before = FakeRunner.trained
    proc = tool_main('train.py', 'c.py', '--work-dir', 'w', '--resume',
                     '--amp', '--quiet', '--tensorboard', '--no-validate',
                     '--auto-scale-lr', '--no-pin-memory',
                     '--no-persistent-workers', '--cfg-options', 'a.b=1',
                     'c=[1,2]')
    assert proc.returncode == 0, proc.stderr
    assert FakeRunner.trained == before + 1
    (args, kwargs), = made.calls
    assert args == ('c.py', 'w')
    assert kwargs == dict(
        resume='auto',
        amp=True,
        quiet=True,
        tensorboard=True,
        validate=False,
        auto_scale_lr=True,
        launcher='none',
        cfg_options={
            'a.b': 1,
            'c': [1, 2]
        },
        pin_memory=False,
        persistent_workers=False)
    # the defaults: no resume, full precision, a validation loop
    tool_main('train.py', 'c.py')
    (args, kwargs) = made.calls[-1]
    assert args == ('c.py', None) and kwargs['resume'] is None and \
        kwargs['amp'] is False and kwargs['validate'] is True and \
        kwargs['cfg_options'] is None
    tool_main('train.py', 'c.py', '--resume', 'ck.pth')
    assert made.calls[-1][1]['resume'] == 'ck.pth'


def test_train_config_switches_pin_memory_and_workers_off_in_every_loader(
        tmp_path):
    """``--no-pin-memory`` / ``--no-persistent-workers`` are written by the
    run's config room (``train_config``), in every loader."""
    cfg = apis.train_config(
        FMNIST_CFG,
        str(tmp_path / 'w'),
        pin_memory=False,
        persistent_workers=False)
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if cfg.get(key) is not None:
            assert cfg[key].pin_memory is False
            assert cfg[key].persistent_workers is False
    kept = apis.train_config(FMNIST_CFG, str(tmp_path / 'w'))  # as the file
    file = Config.fromfile(FMNIST_CFG).train_dataloader
    for key in ('pin_memory', 'persistent_workers'):
        assert kept.train_dataloader.get(key) == file.get(key)


@pytest.mark.parametrize(
    'script,argv,function',
    [('train.py', ['c.py'], 'train_config'),
     ('test.py', ['c.py', 'ck.pth'], 'test'),
     ('pretrain_folder.py', ['imgs'], 'pretrain_folder'),
     ('analysis_tools/knn_eval.py', ['c.py', 'ck.pth'], 'load_config'),
     ('analysis_tools/visualize_hard_patches.py', ['c.py', 'ck.pth'
                                                   ], 'load_config'),
     ('misc/check_data.py', ['c.py'], 'load_config')])
def test_a_refusal_is_one_line_and_exit_1(record, script, argv, function):
    record(function, HPMError('the problem. Fix: the fix.'))
    proc = tool_main(script, *argv)
    name = script.split('/')[-1]
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f'{"tools/" if name == "test.py" else ""}{name}: the problem. Fix: '
        'the fix.'
    ], proc.stderr


@pytest.mark.parametrize('script', [
    'train.py', 'test.py', 'pretrain_folder.py', 'analysis_tools/knn_eval.py',
    'analysis_tools/visualize_hard_patches.py', 'misc/check_data.py'
])
def test_an_unknown_argument_is_exit_2(script):
    proc = tool_main(script, 'x', 'y', '--no-such-option')
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and 'unrecognized arguments: ' in last and \
        last.endswith('--no-such-option'), proc.stderr


def test_anything_else_propagates(record):
    """A bug is not turned into a one-line exit: its traceback stays."""
    record('train_config', ValueError('a bug'))
    with pytest.raises(ValueError, match='a bug'):
        tool_main('train.py', 'c.py')


def test_test_maps_its_options(record):
    tested = record('test', {'accuracy/top1': 50.})
    proc = tool_main('test.py', 'c.py', 'ck.pth', '--work-dir', 'w', '--out',
                     'm.json', '--partial-load', '--cfg-options', 'a=1')
    assert proc.returncode == 0, proc.stderr
    assert tested.calls == [(('c.py', 'ck.pth', 'w'),
                             dict(
                                 out='m.json',
                                 partial_load=True,
                                 launcher='none',
                                 cfg_options={'a': 1}))]


def test_pretrain_folder_maps_its_options_and_prints_the_result(record):
    result = dict(
        config='w/hpm_folder.py',
        knn=dict(num_train=16, num_val=4, acc={
            10: 55.,
            20: 60.
        }),
        grids='w/hard_patches',
        export='export the encoder: python tools/model_converters/'
        'hpm2backbone.py w/epoch_3.pth w/backbone.pth --target mmpretrain')
    made = record('pretrain_folder', result)
    proc = tool_main('pretrain_folder.py', 'imgs', '--work-dir', 'w',
                     '--epochs', '3', '--img-size', '64', '--channels', '1',
                     '--batch-size', '8', '--amp', '--new-run',
                     '--skip-unreadable', '--from', 'ck.pth', '--lr', '0.01',
                     '--alpha-0', '0.25')
    assert proc.returncode == 0, proc.stderr
    (args, kwargs), = made.calls
    assert args == ('imgs', 'w')
    log = kwargs.pop('log')
    assert kwargs == dict(
        epochs=3,
        img_size=64,
        channels=1,
        batch_size=8,
        amp=True,
        resume=False,
        skip_unreadable=True,
        dry_run=False,
        cfg_options=None,
        start_from='ck.pth',
        lr=0.01,
        alpha_0=0.25)
    assert 'kNN top-1 (16 bank / 4 held-out images): k=10: 55.00%, ' \
        'k=20: 60.00%' in proc.stdout
    assert 'hard-patch grids: w/hard_patches/' in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == result['export']
    # the lines the library shows go to the console
    proc = tool_main('pretrain_folder.py', 'imgs', '--resume', '--dry-run')
    assert made.calls[-1][1]['resume'] is True
    assert made.calls[-1][1]['dry_run'] is True
    assert 'kNN top-1' not in proc.stdout
    assert callable(log)
    # --resume and --new-run exclude each other
    assert tool_main('pretrain_folder.py', 'imgs', '--resume',
                     '--new-run').returncode == 2


def test_knn_eval_maps_its_options_prints_and_writes_the_table(
        record, tmp_path):
    cfg = Config(dict())
    loaded = record('load_config', cfg)
    r = dict(
        acc={
            1: 40.,
            10: 50.
        },
        best_k=10,
        best=50.,
        feature='cls',
        layer=-2,
        temperature=0.1,
        precision='fp32',
        num_train=12,
        num_val=6,
        warnings=[])
    knn = record('knn_eval', r)
    out = tmp_path / 'knn.json'
    proc = tool_main('analysis_tools/knn_eval.py', FMNIST_CFG, 'ck.pth',
                     '--ks', '1', '10', '--temperature', '0.1', '--feature',
                     'cls', '--amp', '--teacher', '--layer', '-2', '--out',
                     out, '--cfg-options', 'a=1')
    assert proc.returncode == 0, proc.stderr
    (args, kwargs), = knn.calls
    assert args == (cfg, 'ck.pth')
    assert kwargs.pop('log') is print
    assert kwargs == dict(
        ks=[1, 10],
        temperature=0.1,
        feature='cls',
        teacher=True,
        amp=True,
        raw_pixels=False,
        layer=-2)
    assert loaded.calls == [((FMNIST_CFG, {'a': 1}), {})]
    assert 'kNN top-1 (T=0.1, cls features, block -2, fp32), 12 train / ' \
        '6 test images' in proc.stdout
    assert '| 10 | 50.00 |' in proc.stdout and 'best: k=10, 50.00%' in \
        proc.stdout
    assert json.loads(out.read_text()) == dict(
        hpm_mm_output='knn_eval.py',  # the mark: hpm_mm's to write over
        acc={
            '1': 40.,
            '10': 50.
        },
        best_k=10,
        best=50.,
        feature='cls',
        layer=-2,
        precision='fp32')


def test_visualize_hard_patches_maps_its_options(record, tmp_path):
    cfg = Config(dict())
    record('load_config', cfg)
    drawn = record(
        'hard_patches',
        dict(
            num_images=2,
            shown='teacher',
            spearman_mean=0.5,
            saliency_iou=0.3,
            random_iou=0.2))
    proc = tool_main('analysis_tools/visualize_hard_patches.py', 'c.py',
                     tmp_path / 'run' / 'epoch_3.pth', '--images', 'imgs',
                     '--num-samples', '4', '--progress', '0.5', '--num-masks',
                     '2', '--student', '--saliency', '--fg-threshold', '20',
                     '--masks', 'labels')
    assert proc.returncode == 0, proc.stderr
    (args, kwargs), = drawn.calls
    # the default folder: beside the checkpoint, one per checkpoint
    assert args == (cfg, str(tmp_path / 'run' / 'epoch_3.pth'),
                    str(tmp_path / 'run' / 'hard_patches' / 'epoch_3_student'))
    assert kwargs == dict(
        images='imgs',
        num_samples=4,
        progress=0.5,
        num_masks=2,
        student=True,
        saliency=True,
        fg_threshold=20.,
        masks='labels')
    assert 'Spearman(teacher, true per-patch loss): mean 0.500 over 2 ' \
        'images' in proc.stdout
    assert 'saliency IoU' in proc.stdout and '0.300' in proc.stdout


def test_check_data_exit_code_follows_the_problems(record, monkeypatch):
    import hpm_mm.datasets.data_check as data_check
    record('load_config', Config(dict()))
    checked = record(
        'check_data',
        dict(report=['train_dataloader: 4 samples'], problems=[]),
        module=data_check)
    proc = tool_main('misc/check_data.py', 'c.py', '--max-images', '3')
    assert proc.returncode == 0 and checked.calls[0][0][1] == 3
    assert proc.stdout.splitlines() == [
        'train_dataloader: 4 samples', '0 problem(s)'
    ]
    checked.result = dict(report=[], problems=['train_dataloader: bad'])
    proc = tool_main('misc/check_data.py', 'c.py')
    assert proc.returncode == 1
    assert 'PROBLEM train_dataloader: bad' in proc.stdout


def test_check_mask_generator_exit_code_follows_the_report(monkeypatch):
    import hpm_mm.testing.check_mask_generator as checker
    monkeypatch.setattr(checker, 'load_generator', lambda target: target)
    seen = []

    def report(cls, kwargs, device):
        seen.append((cls, kwargs, device))
        return ['ok   invariants'], len(seen) - 1

    monkeypatch.setattr(checker, 'report', report)
    proc = tool_main('misc/check_mask_generator.py', 'm:C', '--kwargs',
                     '{"mask_ratio": 0.5}')
    assert proc.returncode == 0 and proc.stdout == 'ok   invariants\n'
    assert seen == [('m:C', {'mask_ratio': 0.5}, 'cpu')]
    assert tool_main('misc/check_mask_generator.py', 'm:C').returncode == 1


def test_output_paths_and_counts_are_checked_before_the_work(
        tmp_path, hpm_checkpoint):
    """Every tool's output path is checked before it works (knn_eval.py
    --out a folder died after the evaluation; a converter's output under a
    missing folder, the data folder under a file or in /proc were
    tracebacks), and --num-samples 0 is one line."""
    import gzip

    from helpers import FMNIST_CFG

    from hpm_mm.datasets.fashion_mnist import FILES
    missing = tmp_path / 'no' / 'such' / 'out.pth'
    (tmp_path / 'gz').mkdir()
    for name in FILES:
        with gzip.open(tmp_path / 'gz' / f'{name}.gz', 'wb') as f:
            f.write(b'idx')
    (tmp_path / 'a_file').write_text('')
    runs = [
        ('analysis_tools/knn_eval.py',
         [FMNIST_CFG, hpm_checkpoint, '--out', tmp_path], 'is a folder'),
        ('analysis_tools/visualize_hard_patches.py', [
            FMNIST_CFG, hpm_checkpoint, '--num-samples', '0', '--out-dir',
            tmp_path / 'p'
        ], 'num_samples=0'),
        ('model_converters/hpm2backbone.py',
         [hpm_checkpoint, missing, '--target',
          'mmpretrain'], 'does not exist. Fix: mkdir -p'),
        ('model_converters/official2hpm.py', [hpm_checkpoint, missing],
         'does not exist. Fix: mkdir -p'),
        ('model_converters/target_weights.py',
         ['dino', hpm_checkpoint, missing], 'does not exist'),
        ('test.py',
         [FMNIST_CFG, hpm_checkpoint, '--out',
          missing.with_suffix('.json')], 'does not exist. Fix: mkdir -p'),
        ('test.py', [FMNIST_CFG, hpm_checkpoint, '--out',
                     '/proc/m.json'], 'not writable'),
        *(('dataset_converters/prepare_fashion_mnist.py',
           ['--src', tmp_path / 'gz', '--out', out], says)
          for out, says in (('/proc/hpm_mm_fm', 'not writable'),
                            (tmp_path / 'a_file' / 'fm', 'not a folder'),
                            (tmp_path / 'fm', 'the source is corrupt'))),
    ]
    for script, argv, says in runs:
        proc = tool_main(script, *argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and says in lines[0], \
            (script, proc.stderr[-2000:])
        assert 'kNN: the features' not in proc.stdout  # no work done first
    assert not (tmp_path / 'no').exists() and not (tmp_path / 'p').exists()
    assert list((tmp_path / 'fm').iterdir()) == []  # no part file


def test_knn_eval_follows_the_configs_precision(tmp_path, hpm_checkpoint):
    """The config's precision='bf16' is the kNN pass's (it said fp32)."""
    from helpers import FMNIST_CFG
    small = [
        'custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=32',
        'custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=16'
    ]
    proc = tool_main('analysis_tools/knn_eval.py', FMNIST_CFG, hpm_checkpoint,
                     '--ks', '3', '--cfg-options', 'precision=bf16', *small)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'precision: bf16' in proc.stdout and ', bf16), ' in proc.stdout
