"""hpm_mm.apis: the notebook example of docs/api.md runs as written, in a
plain Python script; the functions refuse with HPMError, never exit."""
import os.path as osp
import re
import subprocess
import sys

import pytest
from helpers import FMNIST_CFG, REPO

from hpm_mm.errors import HPMError


def test_the_notebook_example_runs_as_written(tmp_path):
    with open(osp.join(REPO, 'docs', 'api.md')) as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    assert blocks, 'docs/api.md has no python block'
    script = tmp_path / 'example.py'
    script.write_text(blocks[0])
    proc = subprocess.run([sys.executable, str(script)],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('precision: fp32'), out[:1000]
    assert re.search(r'^epoch 1/1 .*loss_rec', proc.stdout, re.M), out[-2000:]
    assert re.search(
        r'^kNN top-1 at k=3: \d+\.\d% \(24 bank / 8 held-out images\)$',
        proc.stdout, re.M), out[-2000:]


def test_refusals_are_hpm_errors(tmp_path, monkeypatch):
    from hpm_mm.apis import knn_eval, pretrain_folder, train
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HPMError, match='is not a folder'):
        pretrain_folder(str(tmp_path / 'missing'))
    assert not (tmp_path / 'work_dirs').exists()  # no work dir made for it
    monkeypatch.chdir(REPO)  # the configs below are relative
    cfg = tmp_path / 'broken.py'
    cfg.write_text('model = dict(\n')
    with pytest.raises(HPMError, match='broken.py, line 1'):
        train(str(cfg))
    with pytest.raises(HPMError, match='nothing reads'):
        train(
            FMNIST_CFG,
            str(tmp_path / 'w'),
            cfg_options={'trian_cfg.max_epochs': 1})
    plain = tmp_path / 'plain.py'
    plain.write_text(f'_base_ = [{FMNIST_CFG!r}]\ncustom_hooks = []\n')
    with pytest.raises(HPMError, match='no KNNEvalHook'):
        knn_eval(str(plain), 'x.pth')


def test_cfg_options_name_a_list_element_by_its_type():
    """``custom_hooks.KNNEvalHook.ks`` means the kNN hook wherever it sits
    in the list (an index breaks when a user adds a hook); a type the list
    lacks, or holds twice, is one line."""
    import pytest
    from helpers import FMNIST_CFG
    from mmengine.config import Config

    from hpm_mm.apis import HPMError, merge_cfg_options
    cfg = Config.fromfile(FMNIST_CFG)
    cfg.custom_hooks.insert(0, dict(type='EmptyCacheHook'))
    merge_cfg_options(
        cfg, {
            'custom_hooks.KNNEvalHook.ks': [7],
            'custom_hooks.HPMScheduleHook.by_epoch': False
        })
    hooks = {h['type']: h for h in cfg.custom_hooks}
    assert hooks['KNNEvalHook']['ks'] == [7]
    assert hooks['HPMScheduleHook']['by_epoch'] is False
    with pytest.raises(HPMError, match="no element.* of type 'KNNHook'"):
        merge_cfg_options(cfg, {'custom_hooks.KNNHook.ks': [1]})
    cfg.custom_hooks.append(dict(type='EmptyCacheHook'))
    with pytest.raises(HPMError, match="2 element.* of type 'EmptyCacheHook'"):
        merge_cfg_options(cfg, {'custom_hooks.EmptyCacheHook.x': 1})
    n = len(cfg.custom_hooks)  # past the end: mmengine's KeyError, the list
    with pytest.raises(
            HPMError, match=f'beyond its list of {n}. Fix: an '
            f'index < {n}'):
        merge_cfg_options(cfg, {f'custom_hooks.{n}.type': 'TimeLimitHook'})


def test_an_image_option_reaches_every_part_for_every_tool():
    """``--cfg-options image.size=64`` (knn_eval, the pictures, check_data
    load with ``load_config`` and build no runner): the spec is applied
    after the options, so the model and the pipelines take 64 (they kept
    the file's 32, the spec saying 64)."""
    from hpm_mm.apis import load_config
    cfg = load_config(
        osp.join(
            REPO, 'configs/hpm/hpm-fast_vit-mini-p4_1xb256-coslr-10e_'
            'image-folder.py'), {
                'image.size': 64,
                'image.channels': 1,
                'image.mean': [100.],
                'image.std': [50.]
            })
    m = cfg.model
    assert (m.backbone.img_size, m.neck.num_patches,
            m.backbone.patch_cfg.in_channels) == (64, 256, 1)
    pipe = {t['type']: t for t in cfg.train_dataloader.dataset.pipeline}
    assert pipe['LoadAndRandomResizedCrop']['scale'] == 64
    # a loaded Config given to an API (load_model, knn_eval, the pictures):
    # its spec applied the same way, to a copy
    from mmengine.config import Config

    from hpm_mm.apis import load_model
    raw = Config.fromfile(cfg.filename)
    raw.image.size = 64
    model = load_model(raw)
    assert tuple(model.backbone.patch_resolution) == (16, 16)  # 64 / 4
    assert raw.model.backbone.img_size != 64  # the caller's left as it was
    # a run's config (train_config, as tools/train.py makes it): the spec
    # applied after its options, once the runner is not yet built
    from hpm_mm.apis import train_config
    run = train_config(
        raw, '/nonexistent/work', cfg_options={'image.size': 96})
    assert run.model.backbone.img_size == 96


def test_build_runner_leaves_an_explicit_runner_alone_refuses_mmengines():
    from mmengine.config import Config

    from hpm_mm.apis.train import build_runner
    for kind, twin in (('Runner', 'HPMRunner'), ('FlexibleRunner',
                                                 'HPMFlexibleRunner')):
        with pytest.raises(HPMError, match=f"runner_type='{twin}'"):
            build_runner(Config(dict(runner_type=kind)))
    with pytest.raises(KeyError):  # left as named: mmengine looks it up
        build_runner(Config(dict(runner_type='MyRunner')))


def test_train_checks_its_arguments_and_keeps_the_callers(tmp_path):
    """Wrong types are one line (amp='no' counted as True); the caller's
    override dicts are the same after the call (mmengine's merge pops
    _delete_), so a second call with them trains the same config."""
    import copy

    from hpm_mm.apis import train_config
    for bad, match in ((dict(amp='no'), "amp='no': give True or False"),
                       (dict(quiet=1), 'quiet=1'),
                       (dict(work_dir=3), 'work_dir=3'), (dict(resume=1.5),
                                                          'resume=1.5'),
                       (dict(launcher='torchrun'), "launcher='torchrun'"),
                       (dict(cfg_options=['a=1']), 'give a dict')):
        kwargs = dict(dict(work_dir=str(tmp_path / 'w')), **bad)
        with pytest.raises(HPMError, match=re.escape(match)):
            train_config(FMNIST_CFG, **kwargs)
    with pytest.raises(HPMError, match='neither a config file'):
        train_config(42)
    overrides = dict(
        custom_hooks=[dict(type='HPMScheduleHook')],
        train_dataloader=dict(dataset=dict(_delete_=True, type='X')))
    options = {'train_cfg.max_epochs': 2}
    kept = copy.deepcopy((overrides, options))
    first = train_config(
        FMNIST_CFG, str(tmp_path / 'w'), cfg_options=options, **overrides)
    assert (overrides, options) == kept
    second = train_config(
        FMNIST_CFG, str(tmp_path / 'w'), cfg_options=options, **overrides)
    assert first.to_dict() == second.to_dict()
    assert first.train_dataloader.dataset == dict(type='X')


def test_a_missing_config_a_file_as_work_dir_and_no_epochs_are_one_line(
        tmp_path):
    """Tracebacks before (a missing config: 25 lines; --work-dir naming a
    file: an OSError; max_epochs=0: refused with a fix about schedulers)."""
    from hpm_mm.apis import train_config
    from hpm_mm.engine.schedule import check_run_length
    typo = FMNIST_CFG + 'x'
    with pytest.raises(
            HPMError,
            match=r'does not exist \(did you mean ' +
            re.escape(osp.basename(FMNIST_CFG)) + r'\?\)'):
        train_config(typo)
    afile = tmp_path / 'afile'
    afile.write_text('')
    with pytest.raises(HPMError, match='is a file, not a folder'):
        train_config(FMNIST_CFG, str(afile))
    with pytest.raises(HPMError, match=r'max_epochs=0: a run of no epochs'):
        check_run_length(dict(train_cfg=dict(max_epochs=0)))


def test_a_missing_plugin_and_a_launcher_without_torchrun_are_one_line(
        tmp_path, monkeypatch):
    from hpm_mm.apis import train_config
    cfg = tmp_path / 'plugin.py'
    cfg.write_text(f'_base_ = [{FMNIST_CFG!r}]\n'
                   "custom_imports = dict(imports=['hpm_mm', "
                   "'no_such_plugin_module'], allow_failed_imports=False)\n")
    with pytest.raises(HPMError) as e:
        train_config(str(cfg), str(tmp_path / 'w'))
    assert "could not import 'no_such_plugin_module'" in str(e.value) and \
        len(str(e.value).splitlines()) == 1
    for key in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR'):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(HPMError, match="needs torchrun's environment"):
        train_config(FMNIST_CFG, str(tmp_path / 'w'), launcher='pytorch')


def test_testing_a_pretraining_config_is_one_line(tmp_path):
    """tools/test.py on a pretraining config (no test set): 343 lines of
    mmengine's RuntimeError before."""
    from hpm_mm.apis import test
    with pytest.raises(HPMError, match='has no test set .*knn_eval.py'):
        test(FMNIST_CFG, str(tmp_path / 'x.pth'), str(tmp_path / 'w'))


def test_a_launcher_nothing_knows_is_one_line_for_test_too(tmp_path):
    """``test(launcher=...)`` is checked as ``train``'s, first (it reached
    the process group's setup unchecked)."""
    from hpm_mm.apis import test
    with pytest.raises(HPMError, match="launcher='torchrun': give one of"):
        test(FMNIST_CFG, str(tmp_path / 'x.pth'), launcher='torchrun')


@pytest.mark.parametrize('line,says', [
    ("load_fom = 'x.pth'", "nothing reads 'load_fom'. Fix: did you mean "
     'load_from?'),
    ("precison = 'bf16'", 'did you mean precision?'),
    ('max_epoch = 1', 'did you mean train_cfg.max_epochs?'),
    ('randomnes = dict(seed=5)', 'did you mean randomness?'),
])
def test_a_config_files_top_level_typo_is_one_line(tmp_path, line, says):
    """A top-level key of a config file that nothing reads and that is close
    to a key the run reads is refused before anything is built (it trained
    from scratch / in fp32 / the full run); a plain variable the file uses
    while parsed stays legal (the rules:
    tests/test_engine/test_config_check.py)."""
    from hpm_mm.apis import load_config
    cfg = tmp_path / 'typo.py'
    cfg.write_text(f'_base_ = [{FMNIST_CFG!r}]\n{line}\n')
    with pytest.raises(HPMError) as e:
        load_config(str(cfg))
    assert says in str(e.value) and '\n' not in str(e.value), str(e.value)
    fine = tmp_path / 'fine.py'
    fine.write_text(f'_base_ = [{FMNIST_CFG!r}]\nmax_epoch = 1\nseed = 5\n'
                    'train_cfg = dict(max_epochs=max_epoch)\n'
                    'randomness = dict(seed=seed)\nunrelated_note = 3\n')
    assert load_config(str(fine)).train_cfg.max_epochs == 1


@pytest.mark.parametrize('key,says', [
    ('train_cfg.max_epoch', "EpochBasedTrainLoop takes no argument "
     "'max_epoch' (did you mean max_epochs?)"),
    ('optim_wrapper.optimizer.weight_decya', "AdamW takes no argument "
     "'weight_decya' (did you mean weight_decay?)"),
    ('model.mask_generator.mask_ratoi', "HPMMaskGenerator takes no argument "
     "'mask_ratoi' (did you mean mask_ratio?)"),
    ('model.mask_generatr', "model.mask_generatr: HPM takes no argument "
     "'mask_generatr' (did you mean mask_generator or target_generator?); it "
     'takes backbone, neck'),
    ('default_scope', "'HPM' is not in the mmdet scope's model registry "
     "(registered in: mmpretrain). Fix: default_scope='mmpretrain'"),
])
def test_a_typo_below_the_top_level_is_one_line(tmp_path, key, says):
    """A constructor's argument misspelt, or a scope whose registry lacks
    the model: one line naming what is close (30-63 lines of nested
    build tracebacks before)."""
    from helpers import TINY_RUN, tiny_config

    from hpm_mm.apis import train
    cfg = tiny_config(tmp_path, body=TINY_RUN.format(keep=1, epochs=1))
    value = 'mmdet' if key == 'default_scope' else 1
    with pytest.raises(HPMError) as e:
        train(cfg, str(tmp_path / 'w'), cfg_options={key: value})
    assert says in str(e.value) and '\n' not in str(e.value), str(e.value)


@pytest.mark.parametrize('key,value,says', [
    ('model.mask_generator.alpha_T', 2,
     'HPMMaskGenerator: alpha_T must be in [0, 1], got 2. Fix: correct that '
     'value in the config.'),
    ('optim_wrapper.optimizer.lr', -1,
     'AdamW: Invalid learning rate: -1. Fix: '),
    ('model.teacher.momentum', -1, 'EMATeacher: momentum must be in range'),
    ('train_dataloader.batch_size', 0, 'BatchSampler: batch_size should be'),
])
def test_a_value_a_constructor_refuses_is_one_line(tmp_path, key, value, says):
    """A value refused by the constructor the config builds (a ValueError or
    an assert of hpm_mm's, mmpretrain's, mmengine's or torch's): one line
    naming the class and the constructor's reason, not the nested builds'
    traceback; a ValueError raised outside a build stays a traceback
    (tests/test_tools/test_tool_mains.py::test_anything_else_propagates)."""
    from helpers import TINY_RUN, tiny_config

    from hpm_mm.apis import train
    cfg = tiny_config(tmp_path, body=TINY_RUN.format(keep=1, epochs=1))
    with pytest.raises(HPMError) as e:
        train(cfg, str(tmp_path / 'w'), cfg_options={key: value})
    assert str(e.value).startswith(says) and '\n' not in str(e.value), \
        str(e.value)
    from hpm_mm.errors import refused_value
    with pytest.raises(ValueError) as outside:  # not in a build: a bug's
        int('x')
    assert refused_value(outside.value) is None


def test_option_keys_keep_their_meaning_and_plugins_declare_theirs():
    """``key =value`` is ``key=value``; a path with spaces and parentheses
    keeps them; a hook that reads a top-level key of its own declares it
    (``config_keys``) and ``--cfg-options`` sets it."""
    import argparse

    from mmengine.config import Config
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS

    from hpm_mm.apis import CfgOptionsAction, merge_cfg_options
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    got = parser.parse_args([
        '--cfg-options', 'train_cfg.max_epochs =2',
        'load_from=/data/my run (copy)/epoch_1.pth'
    ]).cfg_options
    assert got == {
        'train_cfg.max_epochs': 2,
        'load_from': '/data/my run (copy)/epoch_1.pth'
    }
    cfg = Config(dict(train_cfg=dict(max_epochs=1)))
    with pytest.raises(HPMError, match="nothing reads 'my_plugin_level'"):
        merge_cfg_options(cfg, {'my_plugin_level': 3})

    @HOOKS.register_module(force=True)
    class PluginLevelHook(Hook):
        config_keys = ('my_plugin_level', )

    try:
        assert merge_cfg_options(cfg, {'my_plugin_level': 3}).my_plugin_level \
            == 3
    finally:
        HOOKS.module_dict.pop('PluginLevelHook')


def test_a_strict_load_accounts_for_every_tensor(tmp_path):
    """load_model (kNN, the pictures, the Python API): every tensor the
    model expects is in the file with its shape, and none it lacks, else
    one line naming the first ones by the file's names (a teacher's:
    teacher.module.scorer.*; a wrapped file's: what it holds); only the
    parts a caller reads (kNN: the encoder) are checked, the others may be
    absent or of another shape. The loader had required backbone.* only: a
    file without the loss predictor or a middle block of the decoder
    loaded with those random, a teacher without its decoder took the
    student's initial one, a 2-block config read the first 2 of a file's 4
    (kNN of a cut encoder); a shape was a RuntimeError traceback, in the
    decoder kNN does not read too."""
    import torch

    from hpm_mm.apis import load_model
    full = load_model(FMNIST_CFG).state_dict()

    def saved(name, drop=(), change=(), prefix=''):
        state = {prefix + k: v for k, v in full.items()
                 if not k.startswith(drop)}  # yapf: disable
        state.update((k, torch.zeros(3)) for k in change)
        torch.save(dict(state_dict=state), tmp_path / name)
        return str(tmp_path / name)

    for path, kwargs, says in (
        (saved('no_predictor.pth', ('neck.predictor.', )), {},
         '28 of its 114 tensors are missing (e.g. neck.predictor.blocks.0'),
        (saved('middle.pth', ('neck.decoder_blocks.1.', )), {},
         'missing (e.g. neck.decoder_blocks.1.ln1.weight'),
        (saved('teacher.pth', ('teacher.module.scorer.', )),
         dict(teacher=True), 'missing (e.g. teacher.module.scorer.mask_token'),
        (saved('shape.pth', change=('backbone.pos_embed', )), {},
         'backbone.pos_embed: (3,) in the file, (1, 50, 192) in the model')):
        with pytest.raises(HPMError) as refused:
            load_model(FMNIST_CFG, path, **kwargs)
        line = str(refused.value)
        assert '\n' not in line and says in line, line
        assert line.startswith(f'{path} does not fit the model') and \
            line.endswith('Fix: a checkpoint this config trained' +
                          (', or the student (no --teacher).'
                           if kwargs else '.'))  # yapf: disable
    # a DDP-wrapped file (module.*) is unwrapped once, as mmengine does
    wrapped = load_model(FMNIST_CFG, saved('wrapped.pth', prefix='module.'))
    assert all(
        torch.equal(v, full[k]) for k, v in wrapped.state_dict().items()
        if not k.startswith('teacher.'))
    from mmengine.config import Config
    shallow = Config.fromfile(FMNIST_CFG)
    shallow.model.backbone.arch.num_layers = 2
    for kwargs in (dict(required='backbone.'), dict(teacher=True)):
        with pytest.raises(
                HPMError,
                match='it holds 24 tensors the model '
                'lacks .e.g. (teacher.module.)?backbone.layers.2'):
            load_model(shallow, saved('all.pth'), **kwargs)
    encoder = saved('encoder.pth', ('teacher.', 'neck.decoder_blocks.'),
                    ('neck.decoder_pred.weight', ))
    model = load_model(FMNIST_CFG, encoder, required='backbone.')
    assert torch.equal(model.backbone.pos_embed, full['backbone.pos_embed'])
    model = load_model(FMNIST_CFG, saved('all.pth'), teacher=True)
    assert torch.equal(model.neck.decoder_pred.weight,
                       full['teacher.module.scorer.decoder_pred.weight'])
