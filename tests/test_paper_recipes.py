"""Every ImageNet config against the paper's hyper-parameter tables
(Tab. S1 pre-training, S2 fine-tuning, S3 linear probing), written out here
from the paper: lr = base lr x batch / 256, with the batch read from the
config name ({gpus}xb{per gpu})."""
import glob
import os.path as osp
import re

import pytest
from helpers import NEEDS_FULL, REPO
from mmengine.config import Config

import hpm_mm  # noqa: F401

# Tab. S1 (pre-training): warmup 10 (ViT-B) / 40 (ViT-L)
PRETRAIN = dict(
    optimizer='AdamW',
    base_lr=1.5e-4,
    weight_decay=0.05,
    betas=(0.9, 0.95),
    batch=4096,
    layer_decay=None,
    augmentation=['RandomResizedCrop'])
# Tab. S2 (fine-tuning): 100 epochs ViT-B, 50 ViT-L
FINETUNE = dict(
    optimizer='AdamW',
    base_lr=5e-4,
    weight_decay=0.05,
    betas=(0.9, 0.999),
    batch=1024,
    layer_decay=0.8,
    warmup=5,
    randaug=(9, 0.5),
    label_smoothing=0.1,
    mixup=0.8,
    cutmix=1.0,
    drop_path=0.1)
# Tab. S3 (linear probing)
LINEAR = dict(
    optimizer='SGD',
    base_lr=1e-3,
    weight_decay=0.0,
    momentum=0.9,
    batch=4096,
    warmup=10,
    epochs=100,
    augmentation=['RandomResizedCrop'],
    drop_path=None)

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
# Tab. 1 feature-target rows: Tab. S1's ViT-B 200-epoch recipe
CONFIGS.update({
    f'hpm/targets/{row}_vit-base-p16_8xb512-amp-coslr-200e_in1k.py':
    dict(PRETRAIN, warmup=10, epochs=200)
    for row in [
        f'{a}-{t}-feat{b}' for t in ('ema', 'dino', 'clip')
        for a, b in (('mae', ''), ('hpm', '-lpred'), ('hpm', ''))
    ]
})


def test_every_imagenet_recipe_is_in_the_table():
    found = {
        osp.relpath(p, osp.join(REPO, 'configs'))
        for p in glob.glob(
            osp.join(REPO, 'configs', '**', '*_in1k.py'), recursive=True)
        if '/ablations/' not in p and '/fast/' not in p and 'fsdp' not in p
        # SimMIM/BEiT run their own frameworks' recipes (not in Tab. S1-S3)
        and '/frameworks/' not in p
    }
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
    cosine = [s for s in cfg.param_scheduler if s.type == 'CosineAnnealingLR']
    assert len(cosine) == 1 and cosine[0].begin == want['warmup']
    # an unset end: mmengine ends the scheduler with the run
    assert cosine[0].get('end', cfg.train_cfg.max_epochs) == want['epochs']
    pipeline = cfg.train_dataloader.dataset.pipeline
    types = [t.type for t in pipeline]
    for aug in want.get('augmentation', []):
        # the ImageNet pretraining configs load and crop in one transform
        # (LoadAndRandomResizedCrop: the same box, #56)
        kinds = [aug, 'LoadAndRandomResizedCrop'] \
            if aug == 'RandomResizedCrop' else [aug]
        assert any(k in types for k in kinds), (aug, list(types))
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


# ViTDet (detectron2's mask_rcnn_vitdet_{b,l}_100ep), which the paper's
# detection follows; Tab. 6: the same with max_iter 88750 (12 epochs at 16)
DET = 'benchmarks/det/mask-rcnn_hpm-vit-{}-p16_sfp_{}_coco-1024.py'
DET_RECIPES = {
    ('base', '8xb2-1x'):
    dict(batch=16, decay=0.7, drop_path=0.1, max_iters=88750),
    ('large', '8xb2-1x'):
    dict(batch=16, decay=0.8, drop_path=0.4, max_iters=88750),
    ('base', '32xb2-lsj-100e'):
    dict(batch=64, decay=0.7, drop_path=0.1, epochs=25, repeat=4),
    ('large', '32xb2-lsj-100e'):
    dict(batch=64, decay=0.8, drop_path=0.4, epochs=25, repeat=4),
}


@NEEDS_FULL
@pytest.mark.parametrize('key', list(DET_RECIPES), ids='-'.join)
def test_detection_configs_follow_vitdet(key):
    want = DET_RECIPES[key]
    cfg = Config.fromfile(osp.join(REPO, 'configs', DET.format(*key)))
    gpus, per_gpu = re.search(r'_(\d+)xb(\d+)', DET.format(*key)).groups()
    assert int(gpus) * int(per_gpu) == want['batch'] == \
        cfg.auto_scale_lr.base_batch_size
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay) == ('AdamW', 1e-4, 0.1)
    assert cfg.optim_wrapper.paramwise_cfg.layer_decay_rate == want['decay']
    assert cfg.model.backbone.drop_path_rate == want['drop_path']
    # ViTDet's heads: 2-conv RPN, 4conv1fc box head and mask head with LN
    m = cfg.model
    assert m.rpn_head.num_convs == 2
    assert m.roi_head.bbox_head.type == 'Shared4Conv1FCBBoxHead'
    for norm in (m.roi_head.bbox_head.norm_cfg, m.roi_head.mask_head.norm_cfg,
                 m.neck.norm_cfg):
        assert norm.type == 'mmpretrain.LN2d' and norm.eps == 1e-6
    # large-scale jitter at 1024 for training, 1024 for testing
    train_ds = cfg.train_dataloader.dataset
    if 'repeat' in want:
        assert train_ds.type == 'RepeatDataset' and \
            train_ds.times == want['repeat']
        train_ds = train_ds.dataset
    jitter = next(t for t in train_ds.pipeline if t.type == 'RandomResize')
    assert tuple(jitter.scale) == (1024, 1024) and \
        tuple(jitter.ratio_range) == (0.1, 2.0)
    crop = next(t for t in train_ds.pipeline if t.type == 'RandomCrop')
    assert tuple(crop.crop_size) == (1024, 1024)
    for loader in (cfg.val_dataloader, cfg.test_dataloader):
        resize = next(t for t in loader.dataset.pipeline if t.type == 'Resize')
        assert tuple(resize.scale) == (1024, 1024) and resize.keep_ratio
    warmup, steps = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.start_factor == 0.001
    if 'max_iters' in want:  # detectron2 scales the 100-epoch schedule
        n = want['max_iters']
        assert cfg.train_cfg.type == 'IterBasedTrainLoop' and \
            cfg.train_cfg.max_iters == n
        assert warmup.end == round(250 / 184375 * n) == 120
        assert steps.milestones == [78889, 85463] and not steps.by_epoch
    else:
        assert cfg.train_cfg.max_epochs == want['epochs']
        assert warmup.end == 250 and not warmup.by_epoch
        assert steps.milestones == [22, 24] and steps.by_epoch


@NEEDS_FULL
def test_detection_layer_decay_matches_vitdet():
    """Each parameter's lr scale and weight decay from the constructor vs
    ViTDet's get_vit_lr_decay_rate and detectron2's norm / pos_embed rule,
    written out here by name, on a small ViTSAM Mask R-CNN."""
    import torch.nn as nn
    from mmdet.registry import MODELS
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(
        osp.join(REPO, 'configs', DET.format('base', '8xb2-1x')))
    init_default_scope('mmdet')
    model_cfg = cfg.model
    model_cfg.backbone.update(
        arch=dict(
            embed_dims=64,
            num_layers=4,
            num_heads=2,
            feedforward_channels=128,
            global_attn_indexes=[1, 3]),
        img_size=128,
        window_size=4,
        init_cfg=None)
    model_cfg.neck.in_channels = 64
    model = MODELS.build(model_cfg)
    wrapper = build_optim_wrapper(
        model,
        dict(
            cfg.optim_wrapper,
            type='OptimWrapper',
            paramwise_cfg=dict(num_layers=4, layer_decay_rate=0.7)))
    norms = {
        id(p)
        for mod in model.modules()
        if isinstance(mod, (nn.LayerNorm, nn.GroupNorm))
        for p in mod.parameters(recurse=False)
    }
    seen = 0
    for group in wrapper.optimizer.param_groups:
        assert type(group) is dict  # (FrozenAwareOptimWrapperConstructor's)
        for name, p in zip(group['param_names'], group['params']):
            layer = 5  # num_layers + 1
            if name.startswith('backbone'):
                if '.pos_embed' in name or '.patch_embed' in name:
                    layer = 0
                elif '.layers.' in name:
                    layer = int(name.split('.layers.')[1].split('.')[0]) + 1
            assert group['lr'] == pytest.approx(1e-4 * 0.7**(5 - layer)), \
                name
            decay = 0. if id(p) in norms or 'pos_embed' in name else 0.1
            assert group['weight_decay'] == decay, name
            seen += 1
    assert seen == sum(1 for p in model.parameters() if p.requires_grad)


@NEEDS_FULL
@pytest.mark.parametrize('size,ends', [('base', [2, 5, 8, 11]),
                                       ('large', [5, 11, 17, 23])])
def test_multi_level_variant_differs_only_in_the_pyramid(size, ends):
    """The MAE-paper variant: the 4 subsets' last blocks (the global ones)
    -> mmseg's Feature2Pyramid -> FPN; all else as the Tab. 6 config."""
    ml = Config.fromfile(
        osp.join(REPO, 'configs',
                 DET.format(size, 'mlfpn_8xb2-1x').replace('_sfp_', '_')))
    sfp = Config.fromfile(
        osp.join(REPO, 'configs', DET.format(size, '8xb2-1x')))
    assert ml.model.backbone.out_indices == ends == \
        ml.model.backbone.arch.global_attn_indexes
    adapter, fpn = ml.model.neck
    assert adapter.type == 'mmseg.Feature2Pyramid' and fpn.type == 'FPN'
    width = ml.model.backbone.arch.embed_dims
    assert adapter.embed_dim == width and fpn.in_channels == [width] * 4
    a, b = ml.to_dict(), sfp.to_dict()
    for cfg in (a, b):
        cfg['model'].pop('neck')
        cfg['model']['backbone'].pop('out_indices', None)
    assert a == b


# iBOT as the supplementary table runs it (50 epochs, 2 x 224 + 10 x 96
# crops), with iBOT's recipe: main_ibot.py's defaults, its README's ViT
# command (temperatures, crops, masks, shared 8192-d head) and its advice
# for ViT-B (a normalised last layer); batch 1024 as in the iBOT paper
IBOT = dict(
    batch=1024,
    base_lr=5e-4,
    min_lr=1e-6,
    warmup=10,
    epochs=50,
    betas=(0.9, 0.999),
    weight_decay=(0.04, 0.4),
    clip=3.0,
    drop_path=0.1,
    momentum=(0.004, 0.),
    temps=(0.04, 0.07, 30),
    head=dict(
        hidden_channels=2048,
        bottleneck_channels=256,
        out_channels=8192,
        norm_last_layer=True,
        freeze_last_layer=1),
    crops=[(1, 224, (0.25, 1.)), (1, 224, (0.25, 1.)), (10, 96, (0.05, 0.25))],
    solarize=[0., 0.2, 0.],
    blur=[1.0, 0.1, 0.5],
    mask_ratio=[(0., 0.), (0.1, 0.5)],
    min_block=16)


@pytest.mark.parametrize('hpm', [False, True], ids=['ibot', 'hpm-ibot'])
def test_ibot_configs_follow_ibot(hpm):
    name = 'hpm/frameworks/{}ibot_vit-base-p16_16xb64-amp-coslr-50e_in1k.py'
    cfg = Config.fromfile(
        osp.join(REPO, 'configs', name.format('hpm-' if hpm else '')))
    want, model = IBOT, cfg.model
    assert 16 * cfg.train_dataloader.batch_size == want['batch'] == \
        cfg.auto_scale_lr.base_batch_size
    opt = cfg.optim_wrapper.optimizer
    assert opt.lr == pytest.approx(want['base_lr'] * want['batch'] / 256)
    assert tuple(opt.betas) == want['betas']
    assert cfg.optim_wrapper.clip_grad == dict(
        type='param_norm', max_norm=want['clip'])
    assert cfg.optim_wrapper.type == 'GuardedAmpOptimWrapper'  # fp16
    warmup, cosine, wd = cfg.param_scheduler
    end = cfg.train_cfg.max_epochs  # an unset end: mmengine's, the run's
    assert (warmup.type, warmup.end) == ('LinearLR', want['warmup'])
    assert (cosine.eta_min, cosine.begin,
            cosine.get('end', end)) == (want['min_lr'], want['warmup'],
                                        want['epochs'])
    assert (wd.type, opt.weight_decay, wd.eta_min,
            wd.get('end', end)) == ('CosineAnnealingWeightDecay',
                                    *want['weight_decay'], want['epochs'])
    assert cfg.train_cfg.max_epochs == want['epochs']
    assert model.backbone.drop_path_rate == want['drop_path']
    teacher = model.teacher
    assert (teacher.momentum, teacher.end_momentum) == want['momentum']
    assert (teacher.momentum_schedule,
            teacher.momentum_epochs) == ('cosine', want['epochs'])
    from mmpretrain.registry import MODELS
    head = model.head
    built = MODELS.build(head)  # the class defaults count too
    w, t, epochs = want['temps']
    assert built.temps == ((w, t), (w, t)) and built.warmup_epochs == epochs
    assert {k: model.neck[k] for k in want['head']} == want['head']
    view = cfg.train_dataloader.dataset.pipeline[1]
    assert view.type == 'MultiView'
    for n, pipe, (num, size,
                  scale), sol, blur in zip(view.num_views, view.transforms,
                                           want['crops'], want['solarize'],
                                           want['blur']):
        types = {t.type: t for t in pipe}
        crop = types['RandomResizedCrop']
        assert (n, crop.scale, tuple(crop.crop_ratio_range)) == (num, size,
                                                                 scale)
        assert types['GaussianBlur'].prob == blur
        assert types.get('Solarize', dict(prob=0.)).get('prob') == sol
        assert types['RandomApply'].prob == 0.8  # colour jitter
    gen = model.mask_generator
    assert [tuple(r) for r in gen.mask_ratio] == want['mask_ratio']
    if hpm:
        assert (gen.type, gen.alpha_0, gen.alpha_T) == ('HPMMaskGenerator', 0.,
                                                        0.5)
        assert gen.rest == dict(
            type='BlockwiseMaskGenerator', min_num_patches=want['min_block'])
        assert model.predictor.type == 'HPMLossPredictor'
        assert head.loss_pred.type == 'HPMRelativeLoss'
    else:
        assert (gen.type, gen.min_num_patches) == ('BlockwiseMaskGenerator',
                                                   want['min_block'])
        assert head.loss_pred is None and model.get('predictor') is None
