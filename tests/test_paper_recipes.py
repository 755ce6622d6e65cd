"""Every ImageNet config against the paper's hyper-parameter tables
(Tab. S1 pre-training, S2 fine-tuning, S3 linear probing), written out here
from the paper: lr = base lr x batch / 256, with the batch read from the
config name ({gpus}xb{per gpu})."""
import glob
import os.path as osp
import re

import pytest
from conftest import REPO
from mmengine.config import Config

import hpm_mm  # noqa: F401

# Tab. S1 (pre-training): warmup 10 (ViT-B) / 40 (ViT-L)
PRETRAIN = dict(optimizer='AdamW', base_lr=1.5e-4, weight_decay=0.05,
                betas=(0.9, 0.95), batch=4096, layer_decay=None,
                augmentation=['RandomResizedCrop'])
# Tab. S2 (fine-tuning): 100 epochs ViT-B, 50 ViT-L
FINETUNE = dict(optimizer='AdamW', base_lr=5e-4, weight_decay=0.05,
                betas=(0.9, 0.999), batch=1024, layer_decay=0.8, warmup=5,
                randaug=(9, 0.5), label_smoothing=0.1, mixup=0.8, cutmix=1.0,
                drop_path=0.1)
# Tab. S3 (linear probing)
LINEAR = dict(optimizer='SGD', base_lr=1e-3, weight_decay=0.0, momentum=0.9,
              batch=4096, warmup=10, epochs=100,
              augmentation=['RandomResizedCrop'], drop_path=None)

CONFIGS = {
    'hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py':
    dict(PRETRAIN, warmup=10, epochs=200),
    'hpm/hpm_vit-base-p16_8xb512-amp-coslr-800e_in1k.py':
    dict(PRETRAIN, warmup=10, epochs=800),
    'hpm/hpm_vit-large-p16_8xb512-amp-coslr-200e_in1k.py':
    dict(PRETRAIN, warmup=40, epochs=200),
    'hpm/hpm_vit-large-p16_8xb512-amp-coslr-800e_in1k.py':
    dict(PRETRAIN, warmup=40, epochs=800),
    'benchmarks/classification/vit-base-p16_8xb128-coslr-100e_in1k.py':
    dict(FINETUNE, epochs=100),
    'benchmarks/classification/vit-large-p16_8xb128-coslr-50e_in1k.py':
    dict(FINETUNE, epochs=50),
    'benchmarks/classification/vit-base-p16_8xb512-linear-coslr-100e_in1k.py':
    dict(LINEAR, feature='avg_featmap'),
    'benchmarks/classification/'
    'vit-base-p16_8xb512-linear-cls-coslr-100e_in1k.py':
    dict(LINEAR, feature='cls_token'),
}


def test_every_imagenet_recipe_is_in_the_table():
    found = {osp.relpath(p, osp.join(REPO, 'configs')) for p in glob.glob(
        osp.join(REPO, 'configs', '**', '*_in1k.py'), recursive=True)
        if '/ablations/' not in p and '/fast/' not in p and 'fsdp' not in p}
    assert found == set(CONFIGS)


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_recipe_matches_the_paper(name):
    want = CONFIGS[name]
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    gpus, per_gpu = re.search(r'_(\d+)xb(\d+)', name).groups()
    batch = int(gpus) * int(per_gpu)
    assert batch == want['batch'] == cfg.auto_scale_lr.base_batch_size
    assert cfg.train_dataloader.batch_size == int(per_gpu)
    opt = cfg.optim_wrapper.optimizer
    assert opt.type == want['optimizer']
    assert opt.lr == pytest.approx(want['base_lr'] * batch / 256)
    assert opt.weight_decay == want['weight_decay']
    if 'betas' in want:
        assert tuple(opt.betas) == want['betas']
    if 'momentum' in want:
        assert opt.momentum == want['momentum']
    if 'layer_decay' in want:
        paramwise = cfg.optim_wrapper.get('paramwise_cfg') or {}
        assert paramwise.get('layer_decay_rate') == want['layer_decay']
    assert cfg.train_cfg.max_epochs == want['epochs']
    warmup = cfg.param_scheduler[0]
    assert warmup.type == 'LinearLR' and warmup.by_epoch
    assert warmup.end == want['warmup']
    assert cfg.param_scheduler[-1].type == 'CosineAnnealingLR'
    assert cfg.param_scheduler[-1].end == want['epochs']
    pipeline = cfg.train_dataloader.dataset.pipeline
    types = [t.type for t in pipeline]
    for aug in want.get('augmentation', []):
        assert aug in types
    if 'feature' in want:
        assert cfg.model.backbone.out_type == want['feature']
    if 'drop_path' in want:
        assert cfg.model.backbone.get('drop_path_rate') == want['drop_path']
    if 'randaug' in want:
        ra = next(t for t in pipeline if t.type == 'RandAugment')
        assert (ra.magnitude_level, ra.magnitude_std) == want['randaug']
        assert cfg.model.head.loss.label_smooth_val == \
            want['label_smoothing']
        augments = {a.type: a.alpha for a in cfg.model.train_cfg.augments}
        assert augments == dict(Mixup=want['mixup'], CutMix=want['cutmix'])
    else:  # linear probing: no mixup, cutmix, drop path, colour jitter
        assert 'RandAugment' not in types and 'ColorJitter' not in types
        assert not (cfg.model.get('train_cfg') or {}).get('augments')
