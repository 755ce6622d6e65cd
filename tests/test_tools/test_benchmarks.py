"""A checkpoint from a 2-iteration HPM run feeds kNN, linear probing and
fine-tuning, with every encoder key loaded."""
import os.path as osp

import pytest
import torch
from helpers import FMNIST_CFG, REPO, folder_loader, make_image_folder
from mmengine.config import Config
from mmengine.runner import Runner

LINEAR = osp.join(REPO, 'configs', 'benchmarks', 'classification', 'fmnist',
                  'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py')
FINETUNE = osp.join(REPO, 'configs', 'benchmarks', 'classification', 'fmnist',
                    'vit-mini-p4_1xb128-coslr-10e_fmnist.py')


def test_knn_tool_on_imagenet_style_folder(tmp_path, hpm_checkpoint):
    train = make_image_folder(str(tmp_path / 'train'), 2, 6, seed=1)
    val = make_image_folder(str(tmp_path / 'val'), 2, 3, seed=2)
    cfg = tmp_path / 'knn_cfg.py'
    cfg.write_text(f'''
_base_ = [{FMNIST_CFG!r}]
custom_hooks = [dict(type='KNNEvalHook', ks=(1, 3, 200),
                     train_dataloader={folder_loader(train)!r},
                     val_dataloader={folder_loader(val)!r})]
''')
    from hpm_mm.apis import knn_eval
    from hpm_mm.errors import HPMError
    lines = []
    res = knn_eval(str(cfg), hpm_checkpoint, log=lines.append)
    out = '\n'.join(lines)
    assert 'kNN: the features of the 12 bank images' in out
    assert set(res['acc']) == {1, 3, 12}  # k=200 clipped to 12
    assert all(0 <= v <= 100 for v in res['acc'].values())
    assert (res['num_train'], res['num_val'], res['warnings']) == (12, 6, [])
    # every key of the checkpoint's encoder loads (student and teacher)
    from hpm_mm.apis import load_model
    from hpm_mm.apis.model import load_checkpoint_strict
    assert load_checkpoint_strict(load_model(str(cfg)),
                                  hpm_checkpoint) == dict(
                                      missing=[], unexpected=[])
    teacher = load_checkpoint_strict(
        load_model(str(cfg)), hpm_checkpoint, teacher=True)
    assert not [k for k in teacher['missing'] if k.startswith('backbone.')]
    # the teacher's encoder can be evaluated too
    assert knn_eval(str(cfg), hpm_checkpoint, teacher=True, ks=[1])['acc']
    # and the raw-pixel baseline (a model without parameters)
    res = knn_eval(str(cfg), None, raw_pixels=True, ks=[1, 3])
    assert set(res['acc']) == {1, 3} and all(0 <= v <= 100
                                             for v in res['acc'].values())
    # any encoder block, recorded; one the encoder lacks is one line
    assert knn_eval(str(cfg), hpm_checkpoint, layer=0, ks=[1])['layer'] == 0
    with pytest.raises(HPMError, match='layer 99: the encoder has'):
        knn_eval(str(cfg), hpm_checkpoint, layer=99)
    # what is not a kNN: one line each, nothing evaluated
    for kwargs, words in ((dict(temperature=0.), 'temperature 0.0'),
                          (dict(temperature=-1.), 'temperature -1.0'),
                          (dict(ks=[0]), 'ks [0]'), (dict(ks=[-5]),
                                                     'ks [-5]')):
        with pytest.raises(HPMError) as refused:
            knn_eval(str(cfg), hpm_checkpoint, **kwargs)
        assert str(refused.value).startswith(words) and 'Fix:' in str(
            refused.value) and '\n' not in str(refused.value)
    # a memory bank that is the evaluated set is said to measure nothing
    same = tmp_path / 'same.py'
    same.write_text(f'''
_base_ = [{FMNIST_CFG!r}]
custom_hooks = [dict(type='KNNEvalHook', ks=(1, ),
                     train_dataloader={folder_loader(val)!r},
                     val_dataloader={folder_loader(val)!r})]
''')
    lines.clear()
    res = knn_eval(str(same), hpm_checkpoint, log=lines.append)
    assert any('the memory bank is the evaluated set' in w
               for w in res['warnings']), res


@pytest.mark.parametrize('config,frozen', [(LINEAR, True), (FINETUNE, False)])
def test_classification_benchmarks_load_every_encoder_key(
        tmp_path, hpm_checkpoint, config, frozen):
    data = make_image_folder(str(tmp_path / 'cls'), 2, 4, seed=3)
    cfg = Config.fromfile(config)
    loader = folder_loader(data)
    loader['sampler']['shuffle'] = True
    cfg.train_dataloader = loader
    cfg.val_dataloader = cfg.test_dataloader = folder_loader(data)
    cfg.train_cfg = dict(by_epoch=False, max_iters=2, val_interval=2)
    cfg.param_scheduler = []
    cfg.work_dir = str(tmp_path / 'work')
    cfg.model.backbone.init_cfg.checkpoint = hpm_checkpoint
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=2, by_epoch=False)
    runner = Runner.from_cfg(cfg)
    ckpt = torch.load(hpm_checkpoint, map_location='cpu')['state_dict']
    pretrained = {
        k[len('backbone.'):]: v
        for k, v in ckpt.items() if k.startswith('backbone.')
    }

    runner.model.init_weights()
    backbone = runner.model.backbone.state_dict()
    # strict report: every encoder tensor comes from the checkpoint, except
    # the new fc_norm (ln2) of global average pooling
    new = sorted(set(backbone) - set(pretrained))
    assert new == ['ln2.bias', 'ln2.weight'], new
    unused = sorted(set(pretrained) - set(backbone))
    assert unused == ([] if frozen else ['ln1.bias', 'ln1.weight']), unused
    for k in backbone:
        if k in pretrained:
            assert torch.equal(backbone[k], pretrained[k]), k

    runner.train()
    if frozen:  # the frozen encoder still equals the pretrained one
        backbone = runner.model.backbone.state_dict()
        for k in backbone:
            if k in pretrained:
                assert torch.equal(backbone[k], pretrained[k]), k
    metrics = runner.val_loop.run()
    assert 0 <= metrics['accuracy/top1'] <= 100


@pytest.mark.parametrize('config,augmented', [
    (LINEAR, False),
    (LINEAR.replace('-linear-', '-linear-cls-'), False),
    (FINETUNE, True),
])
def test_fmnist_probe_sees_the_images_as_they_are(config, augmented):
    """The linear probes train on the test pipeline's unaugmented images
    (the protocol of the cached probe, hpm_mm.evaluation.linear_probe);
    fine-tuning keeps its crops and flips."""
    cfg = Config.fromfile(config)
    train = [t['type'] for t in cfg.train_dataloader.dataset.pipeline]
    test = [t['type'] for t in cfg.test_dataloader.dataset.pipeline]
    if augmented:
        assert train == ['RandomCrop', 'RandomFlip', 'PackInputs']
    else:
        assert train == test == ['PackInputs']


def test_frozen_eval_gives_knn_and_linear_on_both_features_in_one_pass(
        tmp_path, hpm_checkpoint):
    """hpm_mm.apis.frozen_eval (the study's evaluation): kNN as knn_eval
    gives it, and the cached linear probe, for the patch average and the
    CLS token."""
    from hpm_mm.apis import frozen_eval, knn_eval, load_config
    train = make_image_folder(str(tmp_path / 'train'), 2, 6, seed=1)
    val = make_image_folder(str(tmp_path / 'val'), 2, 3, seed=2)
    path = tmp_path / 'knn_cfg.py'
    path.write_text(f'''
_base_ = [{FMNIST_CFG!r}]
custom_hooks = [dict(type='KNNEvalHook', ks=(1, 3),
                     train_dataloader={folder_loader(train)!r},
                     val_dataloader={folder_loader(val)!r})]
''')
    cfg = load_config(str(path))
    r = frozen_eval(cfg, hpm_checkpoint, ('avg', 'cls'), linear=True)
    assert set(r['knn']) == set(r['linear']) == {'avg', 'cls'}
    assert r['num_train'] == 12 and r['num_val'] == 6
    for f in ('avg', 'cls'):
        assert r['knn'][f] == knn_eval(cfg, hpm_checkpoint, feature=f)['acc']
        assert 0 <= r['linear'][f] <= 100
