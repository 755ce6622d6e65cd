"""The config room's rules (hpm_mm.engine.config_check): every dict of a
config checked against what receives it, a top-level name nothing reads
refused naming the key that would take it, a file that is no config in one
line; the same mistake the same line through a file, ``--cfg-options``, the
API and a tool, before the work dir is made."""
import os.path as osp
import re

import pytest
from helpers import FMNIST_CFG, tool_main

from hpm_mm.errors import HPMError

#: a mistake in a dict of the run: (option key, value, the same as a file's
#: lines, what the one line says). The keys read with ``.get`` took typos
#: silently; the others were 33-47-line tracebacks at the first step.
DICT_MISTAKES = [
    ('optim_wrapper.paramwise_cfg.custom_key', {},
     'optim_wrapper = dict(paramwise_cfg=dict(custom_key={}))',
     "optim_wrapper.paramwise_cfg.custom_key: FrozenAwareOptimWrapper"
     "Constructor takes no argument 'custom_key' (did you mean custom_keys?)"),
    ('custom_hooks.KNNEvalHook.kss', [1],
     'custom_hooks = [dict(type="KNNEvalHook", kss=[1], '
     'train_dataloader={}, val_dataloader={})]',
     "custom_hooks.KNNEvalHook.kss: KNNEvalHook takes no argument 'kss' "
     '(did you mean ks?)'),
    ('env_cfg.cudnn_benchmarks', True, 'env_cfg = dict(cudnn_benchmarks=True)',
     "env_cfg.cudnn_benchmarks: Runner.setup_env takes no argument "
     "'cudnn_benchmarks' (did you mean cudnn_benchmark?)"),
    ('randomness.seeds', 1, 'randomness = dict(seeds=1)',
     "randomness.seeds: Runner.set_randomness takes no argument 'seeds' "
     '(did you mean seed?)'),
    ('optim_wrapper.optimizer.betas', 0.9,
     'optim_wrapper = dict(optimizer=dict(betas=0.9))',
     "optim_wrapper.optimizer.betas=0.9: expected 2 values (AdamW's default "
     'is (0.9, 0.999))'),
    ('optim_wrapper.clip_grad.max_nrom', 1.0,
     'optim_wrapper = dict(clip_grad=dict(max_nrom=1.0))',
     "optim_wrapper.clip_grad.max_nrom: clip_grad_norm_ takes no argument "
     "'max_nrom' (did you mean max_norm?)"),
    # a backbone's arch dict (mmpretrain checks only that its keys are
    # there), a data preprocessor of the model's default type and dist_cfg
    # (read by mmengine's launchers) took typos silently
    ('model.backbone.arch.num_layer', 3,
     'model = dict(backbone=dict(arch=dict(num_layer=3)))',
     "model.backbone.arch.num_layer: HPMViT.arch takes no argument "
     "'num_layer' (did you mean num_layers?)"),
    ('model.data_preprocessor.to_rgbb', True,
     'model = dict(data_preprocessor=dict(to_rgbb=True))',
     "model.data_preprocessor.to_rgbb: mmpretrain.SelfSupDataPreprocessor "
     "takes no argument 'to_rgbb' (did you mean to_rgb"),
    ('env_cfg.dist_cfg.backnd', 'gloo',
     'env_cfg = dict(dist_cfg=dict(backnd="gloo"))',
     "env_cfg.dist_cfg.backnd: init_process_group takes no argument "
     "'backnd' (did you mean backend"),
]


@pytest.fixture(scope='module')
def fmnist():
    from mmengine.config import Config
    return Config.fromfile(FMNIST_CFG)


@pytest.mark.parametrize(
    'key,value,line,says', DICT_MISTAKES, ids=[m[0] for m in DICT_MISTAKES])
def test_a_dict_key_nothing_takes_is_one_line_through_every_door(
        tmp_path, fmnist, key, value, line, says):
    """Through --cfg-options (a loaded config's, as the tools and
    ``hpm_mm.apis`` merge them) and through a config file: one line naming
    the key path, what is close and the fix, the same line."""
    from hpm_mm.apis import load_config
    with pytest.raises(HPMError) as option:
        load_config(fmnist, {key: value})
    assert str(option.value).startswith(says) and 'Fix: ' in str(
        option.value) and '\n' not in str(option.value), str(option.value)
    cfg = tmp_path / 'mistake.py'
    cfg.write_text(f'_base_ = [{FMNIST_CFG!r}]\n{line}\n')
    with pytest.raises(HPMError) as file:
        load_config(str(cfg))
    assert str(file.value) == str(option.value)


def test_refused_before_the_work_dir_through_the_api_and_the_tool(tmp_path):
    """``hpm_mm.apis.train(cfg, options)`` and tools/train.py: the same line
    (the tool's prefixed by its name, exit 1), no work dir."""
    from hpm_mm.apis import train
    key, value, _, says = DICT_MISTAKES[-1]
    with pytest.raises(HPMError, match=f'^{re.escape(says)}'):
        train(FMNIST_CFG, str(tmp_path / 'w'), cfg_options={key: value})
    proc = tool_main('train.py', FMNIST_CFG, '--work-dir', tmp_path / 'w',
                     '--cfg-options', f'{key}={value}')
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f'train.py: {says}'), proc.stderr[-2000:]
    assert not (tmp_path / 'w').exists()


@pytest.mark.parametrize('body,says', [
    ('seed = 5', "seed = ...: the run reads 'seed' only as randomness.seed, "
     'not at the top level. Fix: randomness.seed='),
    ('max_epochs = 1', "max_epochs = ...: the run reads 'max_epochs' only as "
     'train_cfg.max_epochs'),
])
def test_a_name_nothing_reads_names_the_key_that_would(tmp_path, body, says):
    """The run used seed 0 and 10 epochs, silently."""
    from hpm_mm.apis import load_config
    cfg = tmp_path / 'child.py'
    cfg.write_text(f'_base_ = [{FMNIST_CFG!r}]\n{body}\n')
    with pytest.raises(HPMError) as e:
        load_config(str(cfg))
    assert f'{cfg}: {says}' in str(e.value) and '\n' not in str(e.value)


def test_a_variable_is_read_by_its_file_and_its_children_not_its_bases(
        tmp_path):
    """mmengine's trap: a base's dicts took the base's value of a variable
    when it was parsed; the child's assignment reaches nothing (nor does
    one below the lines that read the variable). A variable read below it
    in its own file, or by a child (``{{_base_.x}}``, ``_base_.x``), is
    read."""
    from hpm_mm.apis import load_config
    (tmp_path / 'base.py').write_text(
        f'_base_ = [{FMNIST_CFG!r}]\nepochs = 3\n'
        "my_pipeline = [dict(type='PackInputs')]\n"
        'train_cfg = dict(max_epochs=epochs)\n'
        'train_dataloader = dict(dataset=dict(pipeline=my_pipeline))\n')
    (tmp_path / 'unread.py').write_text(f'_base_ = [{FMNIST_CFG!r}]\n'
                                        'max_epochs = 5\n')

    def child(name, body, base='base.py'):
        (tmp_path / name).write_text(f"_base_ = ['./{base}']\n{body}\n")
        return str(tmp_path / name)

    with pytest.raises(HPMError) as e:
        load_config(
            child('trap.py', "my_pipeline = [dict(type='PackInputs',"
                  ' meta_keys=())]'))
    assert str(e.value).startswith(
        f"{tmp_path / 'trap.py'}: my_pipeline = ...: {tmp_path / 'base.py'} "
        'read an earlier my_pipeline into train_dataloader; nothing reads '
        'this one'), str(e.value)
    with pytest.raises(
            HPMError,
            match='late.py read an earlier n into '
            'train_cfg; nothing reads this one'):
        load_config(
            child('late.py', 'n = 2\ntrain_cfg = dict(max_epochs=n)'
                  '\nn = 4'))
    with pytest.raises(
            HPMError,
            match=r'unread.py\): max_epochs = \.\.\.: '
            'the run reads .max_epochs. only as train_cfg'):
        load_config(child('plain.py', '', base='unread.py'))
    read = [
        ('epochs = 2\ntrain_cfg = dict(max_epochs=epochs)', 'base.py'),
        ('for n in range(2):\n    m = n\nrandomness = dict(seed=n)',
         'base.py'),
        ('randomness = dict(seed={{_base_.max_epochs}})', 'unread.py'),
        ('randomness = dict(seed=_base_.max_epochs + 1)', 'unread.py'),
        ('unrelated_note = 3', 'base.py'),
    ]
    for i, (body, base) in enumerate(read):
        load_config(child(f'read{i}.py', body, base))


def test_a_dumped_run_config_loads_again(hpm_checkpoint, tmp_path):
    """The config a run dumps in its work dir (mmengine's ``cfg.dump``:
    every variable kept, as values nothing reads, in a file that inherits
    none) loads as it is, and in json."""
    from mmengine.config import Config

    from hpm_mm.apis import load_config
    dumped = osp.join(osp.dirname(hpm_checkpoint), 'tiny_cfg.py')
    assert load_config(dumped).train_cfg.max_epochs == 1
    Config.fromfile(dumped).dump(str(tmp_path / 'run.json'))
    load_config(str(tmp_path / 'run.json'))


def test_a_checkpoint_or_a_missing_base_as_the_config_is_one_line(
        hpm_checkpoint, tmp_path):
    from hpm_mm.apis import load_config
    with pytest.raises(HPMError, match='is no config file .*load_from'):
        load_config(hpm_checkpoint)
    cfg = tmp_path / 'child.py'
    cfg.write_text(f"_base_ = [{FMNIST_CFG[:-3] + 's.py'!r}]\n")
    with pytest.raises(HPMError) as e:
        load_config(str(cfg))
    assert str(e.value).startswith(f'{cfg}: its _base_ ') and \
        'does not exist (did you mean hpm_vit-mini-p4_1xb256-coslr-10e_' \
        'fmnist.py?). Fix: ' in str(e.value), str(e.value)
    cfg.write_text(f'_base_ = [{hpm_checkpoint!r}]\n')  # was a traceback
    with pytest.raises(HPMError, match="its _base_ .* is no config file"):
        load_config(str(cfg))
    cfg.write_text("_base_ = ['./chil.py']\n")  # it suggested child.py itself
    with pytest.raises(HPMError, match=r'does not exist\. Fix: '):
        load_config(str(cfg))


def test_kwargs_are_followed_where_passed_on_or_read_by_key():
    """A constructor's ``**kwargs`` passed on to its base's ``__init__``
    takes the base's keys and those it reads itself; one used otherwise
    (kept, iterated) takes any key: no false refusal."""
    from hpm_mm.engine.config_check import _takes

    class Base:

        def __init__(self, a=1, *, b=2):
            pass

    class PassesOn(Base):

        def __init__(self, c=3, **kwargs):
            super().__init__(**kwargs)

    class ReadsOne(Base):

        def __init__(self, c=3, **kwargs):
            self.d = kwargs.pop('d', 4)
            kwargs.setdefault('b', 5)
            super().__init__(**kwargs)

    class KeepsThem(Base):

        def __init__(self, **kwargs):
            self.extra = kwargs
            super().__init__(**kwargs)

    assert _takes(PassesOn) == ('c', 'a', 'b')
    assert _takes(ReadsOne) == ('c', 'd', 'b', 'a')
    assert _takes(KeepsThem) is None


def test_a_run_reads_its_config_once_and_an_unread_one_is_checked(
        tmp_path, monkeypatch):
    """tools/train.py reads its config once (``from_cfg`` read it again:
    its dicts checked and its image spec applied twice, two more deep
    copies); a config that did not come through ``load_config``
    (``HPMRunner.from_cfg`` / ``RUNNERS.build`` of ``Config.fromfile``) is
    read there: its dicts checked, its image spec applied. Each read checks
    the dicts once: the calls of ``check_config_dicts`` count the reads."""
    from helpers import REPO, TINY_RUN, tiny_config
    from mmengine.config import Config
    from mmengine.registry import RUNNERS

    import hpm_mm.engine.config_check as room
    from hpm_mm.engine.runner import HPMRunner
    reads, check = [], room.check_config_dicts
    monkeypatch.setattr(room, 'check_config_dicts',
                        lambda cfg: reads.append(cfg.filename) or check(cfg))
    cfg = tiny_config(tmp_path, body=TINY_RUN.format(keep=1, epochs=1))
    proc = tool_main('train.py', cfg, '--work-dir', tmp_path / 'w')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert reads == [cfg]
    raw = Config.fromfile(
        osp.join(
            REPO, 'configs/hpm/hpm-fast_vit-mini-p4_1xb256-coslr-10e_'
            'image-folder.py'))
    raw.image.size = 50
    with pytest.raises(HPMError, match='not a multiple of image.patch_size'):
        HPMRunner.from_cfg(raw)
    raw = Config.fromfile(FMNIST_CFG)
    raw.merge_from_dict({'randomness.seeds': 1})
    with pytest.raises(HPMError, match=re.escape(DICT_MISTAKES[3][3])):
        RUNNERS.build(raw)
    assert len(reads) == 3
