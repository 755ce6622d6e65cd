"""hpm_mm used from outside the repository, as docs/extending.md shows: configs
that inherit ours through ``hpm_mm::`` in a folder of their own, run by the
tools and by mmengine's own Runner from that folder (issue #30)."""
import json
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from helpers import REPO, process

HPM_BASE = 'hpm_mm::hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
LINEAR_BASE = ('hpm_mm::benchmarks/classification/fmnist/'
               'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py')
# kNN and the pictures on a few images (the configs' hooks read all 70k)
SMALL_EVAL = [
    'custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=64',
    'custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=32',
]


def run_outside(cwd, *args, python=sys.executable):
    """``python ARGS`` with ``cwd`` as the working directory (not the
    repository), failing with the output."""
    proc = process(*args, cwd=cwd, env=dict(PYTHONUNBUFFERED=1), python=python)
    if proc.returncode != 0:
        pytest.fail(f'{args} failed ({proc.returncode}):\n'
                    f'{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')
    return proc


def tool(name):
    return osp.join(REPO, 'tools', name)


def main_outside(monkeypatch, cwd, name, *args):
    """The tool ``name``'s ``main(args)`` in this process with ``cwd`` as
    the working directory (one process: the fixture's training run),
    failing with its output."""
    from helpers import tool_main
    monkeypatch.chdir(cwd)
    proc = tool_main(name, *args)
    if proc.returncode != 0:
        pytest.fail(f'{name} {args} failed ({proc.returncode}):\n'
                    f'{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')
    return proc


@pytest.fixture(scope='module')
def outside(tmp_path_factory, warm):
    """A folder outside the repository with a config that holds nothing but
    an ``hpm_mm::`` base and one override, trained there for 2 iterations
    by tools/train.py; returns (folder, config, checkpoint)."""
    folder = tmp_path_factory.mktemp('my_project')
    assert not str(folder).startswith(REPO)
    (folder / 'my_hpm.py').write_text(
        f'_base_ = {HPM_BASE!r}\n'
        'train_dataloader = dict(batch_size=8, num_workers=0, '
        'persistent_workers=False, dataset=dict(indices=16))\n')
    run_outside(
        folder,
        tool('train.py'),
        'my_hpm.py',
        '--cfg-options',
        'train_cfg.max_epochs=1',
        *SMALL_EVAL,
        python=warm)
    work = folder / 'work_dirs' / 'my_hpm'  # relative to the folder
    assert (work / 'epoch_1.pth').exists() and (work / 'knn.json').exists()
    assert len(list((work / 'hard_patches').glob('*.png'))) > 0
    return folder, 'my_hpm.py', str(work / 'epoch_1.pth')


def test_package_base_trains_through_the_tools(outside):
    """The 2 iterations ran with the inherited model, data (found in the
    checkout from another working directory) and hooks."""
    folder, _, ckpt = outside
    state = torch.load(ckpt, map_location='cpu', weights_only=False)
    assert state['meta']['iter'] == 2
    assert any(k.startswith('teacher.') for k in state['state_dict'])
    knn = json.loads(
        (folder / 'work_dirs' / 'my_hpm' / 'knn.json').read_text())
    assert knn['num_train'] == 64 and knn['num_val'] == 32


def test_package_base_evaluates_through_the_tools(outside, monkeypatch):
    """knn_eval.py and visualize_hard_patches.py on the hpm_mm:: config
    from the outside folder."""
    folder, cfg, ckpt = outside
    out = folder / 'knn_again.json'
    main_outside(monkeypatch, folder, 'analysis_tools/knn_eval.py', cfg, ckpt,
                 '--out', str(out), '--cfg-options', *SMALL_EVAL)
    assert json.loads(out.read_text())['best'] >= 0
    main_outside(monkeypatch, folder,
                 'analysis_tools/visualize_hard_patches.py', cfg, ckpt,
                 '--num-samples', '2', '--num-masks', '2')
    # by default beside the checkpoint, in a folder of its own (it wrote to
    # work_dirs/hard_patches of the working directory, shared by all)
    beside = osp.join(osp.dirname(ckpt), 'hard_patches', 'epoch_1')
    files = sorted(os.listdir(beside))  # two samples spread over the set
    assert len(files) == 3 and files[-1] == 'summary.json' and all(
        f.startswith('sample_') and f.endswith('.png') for f in files[:2])
    assert not (folder / 'work_dirs' / 'hard_patches').exists()


def test_package_base_tests_through_test_py(outside, monkeypatch):
    """tools/test.py with a classifier config that inherits ours."""
    folder, _, _ = outside
    (folder / 'my_linear.py').write_text(
        f'_base_ = {LINEAR_BASE!r}\n'
        'test_dataloader = dict(batch_size=16, num_workers=0, '
        'persistent_workers=False, dataset=dict(indices=32))\n')
    from mmengine.config import Config

    import hpm_mm  # noqa: F401
    from hpm_mm.apis import load_model
    model = load_model(Config.fromfile(str(folder / 'my_linear.py')))
    ckpt = folder / 'linear.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    out = folder / 'metrics.json'
    main_outside(monkeypatch, folder, 'test.py', 'my_linear.py', str(ckpt),
                 '--out', str(out))
    assert 'accuracy/top1' in json.loads(out.read_text())


def test_package_base_trains_with_mmengines_runner(outside):
    """mmengine's own Runner, after ``import hpm_mm`` (which lets mmengine
    read ``hpm_mm::`` configs), from the outside folder."""
    folder, cfg, _ = outside
    (folder / 'run_it.py').write_text(
        'import hpm_mm  # noqa: F401\n'
        'from mmengine.config import Config\n'
        'from mmengine.runner import Runner\n'
        f'cfg = Config.fromfile({cfg!r})\n'
        "cfg.work_dir = 'runner_work'\n"
        'cfg.train_cfg.max_epochs = 1\n'
        "cfg.custom_hooks = [dict(type='HPMScheduleHook')]\n"
        'Runner.from_cfg(cfg).train()\n')
    run_outside(folder, 'run_it.py')
    assert (folder / 'runner_work' / 'epoch_1.pth').exists()


def docs_blocks(lang, page='extending.md'):
    """The ```lang code blocks of docs/PAGE, in order."""
    text = open(osp.join(REPO, 'docs', page)).read()
    return re.findall(rf'```{lang}\n(.*?)```', text, flags=re.S)


def scalar_rows(work):
    """The logged scalars of the runs in ``work``, a dict per line."""
    return [
        json.loads(line) for path in work.glob('*/vis_data/scalars.json')
        for line in open(path)
    ]


def run_docs_example(tmp_path, folder, project, names, python):
    """The ``# FOLDER/NAME`` python blocks of docs/extending.md (checked
    equal to projects/PROJECT/NAME) written into tmp_path/FOLDER, then its
    ``cd FOLDER`` bash block run as written by ``python`` (the warm one);
    (the process, the smoke run's logged scalars, its checkpoint's state
    dict)."""
    files = {}
    for block in docs_blocks('python'):
        first, _, body = block.partition('\n')
        if first.startswith(f'# {folder}/'):
            files[first[len(f'# {folder}/'):]] = body
    assert set(files) == set(names)
    (tmp_path / folder).mkdir()
    for name, body in files.items():
        shipped = open(osp.join(REPO, 'projects', project, name)).read()
        assert body == shipped, f'docs and projects/{project}/{name}'
        (tmp_path / folder / name).write_text(body)
    commands = [
        b for b in docs_blocks('bash') if b.startswith(f'cd {folder}\n')
    ]
    assert len(commands) == 1
    script = commands[0].replace('$HPM/.venv/bin/python', python)
    proc = subprocess.run(['bash', '-euo', 'pipefail', '-c', script],
                          cwd=tmp_path,
                          capture_output=True,
                          text=True,
                          timeout=900,
                          env=dict(os.environ, HPM=REPO, PYTHONUNBUFFERED='1'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    work = tmp_path / folder / 'work_dirs' / 'smoke'
    rows = scalar_rows(work)
    state = torch.load(
        work / 'epoch_1.pth', map_location='cpu',
        weights_only=False)['state_dict']
    return proc, rows, state


def test_the_extending_example_runs_as_written(tmp_path, warm):
    """docs/extending.md's out-of-tree example: its two files (the same as
    projects/contrast_mask/) in a folder outside the repository, then its
    commands as written -- the contract's property check on the new
    generator and the iteration-scheduled smoke test, which reads the image
    scores and builds no teacher."""
    proc, rows, state = run_docs_example(
        tmp_path, 'my_hpm', 'contrast_mask',
        ['contrast_mask.py', 'hpm-contrast_fmnist.py'], warm)
    assert 'ContrastMaskGenerator: every property holds' in proc.stdout
    hard = [r['num_hard'] for r in rows if 'num_hard' in r]
    assert hard and hard[-1] > 0  # the last iteration masked by score
    assert not any(k.startswith('teacher.') for k in state)  # no teacher
    assert (tmp_path / 'my_hpm' / 'work_dirs' / 'smoke' / 'knn.json').exists()


def test_an_outside_teacher_score_source_trains_as_written(tmp_path, warm):
    """docs/extending.md's teacher score source (projects/token_norm/),
    registered from a folder outside the repository with no library edit:
    the smoke run builds a teacher and masks by the source's scores."""
    _, rows, state = run_docs_example(
        tmp_path, 'my_scores', 'token_norm',
        ['token_norm.py', 'hpm-token-norm_fmnist.py'], warm)
    hard = [r['num_hard'] for r in rows if 'num_hard' in r]
    assert hard and hard[-1] > 0  # masked by the token norms
    assert any(k.startswith('teacher.module.backbone.') for k in state)
    # its checkpoint converts where the plugin is not importable (this
    # process): converting reads none of its code (a raw ImportError)
    import importlib.util

    from helpers import tool_main
    assert importlib.util.find_spec('token_norm') is None
    ckpt = tmp_path / 'my_scores' / 'work_dirs' / 'smoke' / 'epoch_1.pth'
    proc = tool_main('model_converters/hpm2backbone.py', ckpt,
                     tmp_path / 'vit.pth', '--target', 'mmpretrain')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'every tensor of the backbone loaded' in proc.stdout


def test_an_unknown_score_source_lists_the_registered_ones():
    from helpers import tiny_hpm

    from hpm_mm.errors import HPMError
    from hpm_mm.models.teachers import TEACHER_SCORES
    model = tiny_hpm()
    with pytest.raises(HPMError) as e:
        model.teacher(torch.zeros(1, 3, 32, 32), scores='no_such_source')
    msg = str(e.value)
    assert "'no_such_source' is not a registered teacher score source" in msg
    for name in ('predicted_loss', 'cls_attention'):
        assert name in msg and TEACHER_SCORES.get(name) is not None
    assert 'TEACHER_SCORES.register_module' in msg


def test_an_outside_loss_and_hook_train_as_written(tmp_path, warm):
    """docs/extending.md's L_pred loss, loss predictor and hook
    (projects/margin_rank/), from a folder outside the repository: the run
    trains L_pred with the margin loss (checked pair by pair) and the hook
    writes the epoch's ranking accuracy; a framework run trains and scores
    with the outside predictor."""
    _, rows, state = run_docs_example(tmp_path, 'my_loss', 'margin_rank', [
        'margin_rank.py', 'hpm-margin-rank_fmnist.py',
        'hpm-simmim-linear-predictor_fmnist.py'
    ], warm)
    assert any('loss_pred' in r for r in rows)
    work = tmp_path / 'my_loss' / 'work_dirs' / 'smoke'
    logged = [json.loads(ln) for ln in open(work / 'rank_acc.jsonl')]
    assert [r['epoch'] for r in logged] == [1]
    assert 0 <= logged[0]['rank_acc'] <= 1
    assert 'MarginRankLoss' in open(
        next(work.glob('hpm-margin-rank_fmnist.py'))).read()
    # the framework run with the outside loss predictor: the student's and
    # the teacher's predictor are it, and the mask read its scores
    work = tmp_path / 'my_loss' / 'work_dirs' / 'smoke_predictor'
    ckpt = torch.load(
        work / 'epoch_1.pth', map_location='cpu',
        weights_only=False)['state_dict']
    assert 'predictor.fc.weight' in ckpt
    assert 'teacher.module.scorer.fc.weight' in ckpt
    hard = [r['num_hard'] for r in scalar_rows(work) if 'num_hard' in r]
    assert hard and hard[-1] > 0
    # the loss is what its docstring says, pair by pair
    sys.path.insert(0, str(tmp_path / 'my_loss'))
    try:
        from margin_rank import MarginRankLoss
    finally:
        sys.path.pop(0)
    s, t = torch.tensor([[0.3, 0.1, 0.5]]), torch.tensor([[1., 2., 3.]])
    mask = torch.tensor([[1., 1., 0.]])
    # one pair counts: (i=0, j=1), l_1 > l_0: max(0, 0.1 - (0.1 - 0.3))
    assert MarginRankLoss(0.1)(s, t, mask).item() == pytest.approx(0.3)


def test_own_data_config_runs_as_written_and_the_image_spec_flows(
        tmp_path, warm):
    """docs/own_data.md: a config that sets `image` once over the image-
    folder base, run as written on an RGB folder: every part takes the
    size, channels and patch size; a grayscale 48-px spec flows the same
    way; a bad spec is one line."""
    import numpy as np
    from mmengine.config import Config
    from PIL import Image
    folder = tmp_path / 'my_data'
    rng = np.random.default_rng(0)
    (folder / 'images' / 'sub').mkdir(parents=True)
    for i in range(12):
        a = rng.integers(0, 200, (40 + i, 48, 3), dtype=np.uint8)
        a[10:25, 10:30] = 240
        Image.fromarray(a).save(folder / 'images' / ('sub' if i % 2 else '.') /
                                f'{i}.jpg')
    blocks = [b for b in docs_blocks('python', 'own_data.md')]
    first, _, body = blocks[0].partition('\n')
    assert first == '# my_data/my_images.py'
    (folder / 'my_images.py').write_text(body)
    script = [
        b for b in docs_blocks('bash', 'own_data.md')
        if b.startswith('cd my_data\n')
    ][0]
    proc = subprocess.run([
        'bash', '-euo', 'pipefail', '-c',
        script.replace('$HPM/.venv/bin/python', warm)
    ],
                          cwd=tmp_path,
                          capture_output=True,
                          text=True,
                          timeout=900,
                          env=dict(os.environ, HPM=REPO, PYTHONUNBUFFERED='1'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    work = folder / 'work_dirs' / 'mine'
    assert len(list((work / 'hard_patches').glob('*.png'))) == 4
    cfg = Config.fromfile(str(work / 'my_images.py'))
    m = cfg.model
    assert (m.backbone.img_size, m.backbone.patch_cfg.in_channels,
            m.neck.num_patches, m.head.in_channels) == (32, 3, 64, 3)
    assert cfg.data_preprocessor.to_rgb is True
    from hpm_mm.apis import HPMError, load_config
    gray = tmp_path / 'gray.py'
    gray.write_text(f'_base_ = [{str(folder / "my_images.py")!r}]\n'
                    "image = dict(size=48, channels=1, patch_size=8, "
                    "mean=[100.], std=[50.])\n")
    cfg = load_config(str(gray))
    m = cfg.model
    assert (m.backbone.img_size, m.backbone.patch_size,
            m.backbone.patch_cfg.in_channels, m.neck.num_patches,
            m.neck.in_chans, m.head.patch_size) == (48, 8, 1, 36, 1, 8)
    for loader in (cfg.train_dataloader, cfg.custom_hooks[1]['dataloader']):
        pipe = {t['type']: t for t in loader['dataset']['pipeline']}
        load = pipe.get('LoadImageFromFileChecked') or \
            pipe['LoadAndRandomResizedCrop']  # the train pipeline's
        assert load['color_type'] == 'grayscale'
        assert 48 in (pipe.get('LoadAndRandomResizedCrop',
                               {}).get('scale'), pipe.get('CenterCrop',
                                                          {}).get('crop_size'))
        assert loader['dataset']['data_root'] == 'images/'
    gray.write_text(gray.read_text().replace('size=48', 'size=50'))
    with pytest.raises(HPMError, match='not a multiple of image.patch_size'):
        load_config(str(gray))


def test_the_contract_check_reports_a_generator_without_per_image_ratios():
    """A generator of one's own that refuses per-image ratios when built:
    the checker names that property and checks the rest (it raised the
    generator's error from the host-synchronisation check)."""
    from hpm_mm.models import RandomMaskGenerator
    from hpm_mm.testing.check_mask_generator import report

    class FixedRatioOnly(RandomMaskGenerator):

        def __init__(self, mask_ratio=0.75, **kwargs):
            if not isinstance(mask_ratio, float):
                raise ValueError('a fixed ratio only')
            super().__init__(mask_ratio=mask_ratio, **kwargs)

    lines, bad = report(FixedRatioOnly)
    assert bad == 1, lines
    assert 'FAIL per-image ratios' in lines[-2] and \
        'ValueError: a fixed ratio only' in lines[-2]
    assert 'ok   no host synchronisation (mask_ratio=0.6)' in lines
