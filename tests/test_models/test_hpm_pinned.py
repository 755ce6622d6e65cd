"""Numbers pinned before the parts refactor (commit 7641b6d, the HPM class
holding its teacher): the refactored modules must give the same losses for
the same seeds, inputs and optimizer steps, and the Fashion-MNIST configs
(now built from shared bases) the same models. Recorded with the old code by
running :func:`run` on it."""
import pytest
import torch
from conftest import FMNIST_CFG, REPO
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import init_default_scope
from mmpretrain.registry import MODELS

import hpm_mm  # noqa: F401

MAE_CFG = REPO + '/configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
KEYS = ('loss_rec', 'loss_pred', 'rank_acc', 'alpha', 'num_hard')
# (loss_rec, loss_pred, rank_acc, alpha, num_hard) per step
TINY = [
    (13024.7373046875, 0.6880568265914917, 0.6022727489471436, 0.5, 6.0),
    (12774.8388671875, 0.6899175643920898, 0.5454545617103577, 0.5, 6.0),
    (12704.72265625, 0.6825283169746399, 0.6401515007019043, 0.5, 6.0),
    (12215.7080078125, 0.6830974817276001, 0.625, 0.5, 6.0),
]
TINY_HALFRES = [
    (12977.0263671875, 0.6894134879112244, 0.5871211886405945, 0.5, 6.0),
    (12832.7255859375, 0.6888056397438049, 0.5681818127632141, 0.5, 6.0),
    (12753.7119140625, 0.6833404898643494, 0.6136363744735718, 0.5, 6.0),
    (12412.265625, 0.6820012927055359, 0.6363636255264282, 0.5, 6.0),
]
FMNIST_HPM = [
    (1.9364744424819946, 0.7125369906425476, 0.39361703395843506, 0.0, 0.0),
    (2.3766729831695557, 0.7273013591766357, 0.4285239279270172, 0.1666666716337204, 8.0),
    (0.8653035163879395, 0.7138242721557617, 0.43384307622909546, 0.3333333432674408, 16.0),
]
FMNIST_HPM_PARAM_SUM = 15919.78425502051
FMNIST_MAE = [1.8874540328979492, 2.017815351486206, 0.7193713784217834]
FMNIST_MAE_PARAM_SUM = 12300.896534358622


def tiny(input_scale=1.0):
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='HPM',
        backbone=dict(type='HPMViT', arch=dict(
            embed_dims=32, num_layers=2, num_heads=2,
            feedforward_channels=64), img_size=16, patch_size=4,
            patch_cfg=dict(in_channels=1)),
        neck=dict(type='HPMPretrainDecoder', num_patches=16, patch_size=4,
                  in_chans=1, embed_dim=32, decoder_embed_dim=16,
                  decoder_depth=1, decoder_num_heads=2, predictor_depth=1),
        head=dict(type='HPMPretrainHead', patch_size=4, in_channels=1),
        mask_generator=dict(type='HPMMaskGenerator', mask_ratio=0.75,
                            alpha_0=0.5, alpha_T=0.5),
        teacher=dict(type='EMATeacher', momentum=0.1, end_momentum=0.05,
                     momentum_epochs=4, input_scale=input_scale),
        data_preprocessor=dict(type='SelfSupDataPreprocessor', mean=[0.],
                               std=[1.])))
    model.init_weights()
    return model


def from_config(path):
    init_default_scope('mmpretrain')
    cfg = Config.fromfile(path)
    model_cfg = cfg.model.to_dict()
    model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor.to_dict())
    torch.manual_seed(0)
    model = MODELS.build(model_cfg)
    model.init_weights()
    param_sum = float(sum(v.double().sum() for v in model.state_dict().values()
                          if v.dtype.is_floating_point))
    return model, param_sum


def run(model, steps=4, batch=4, channels=1, size=16):
    """``steps`` train steps (AdamW, clip 5) on fixed random batches, the
    schedule at i / steps and epoch i; the log of each step."""
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(batch, channels, size, size, generator=g) * 50 + 100
          for _ in range(steps)]
    optim = OptimWrapper(torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=1e-3),
        clip_grad=dict(max_norm=5.0))
    logs = []
    torch.manual_seed(2)
    for i, x in enumerate(xs):
        if hasattr(model, 'set_progress'):
            model.set_progress(i / steps, epoch=i)
        logs.append(model.train_step(dict(inputs=x, data_samples=None), optim))
    return logs


def _check(logs, want):
    got = [float(log[k]) for log in logs for k in KEYS]
    assert got == pytest.approx([v for row in want for v in row], rel=1e-5,
                                abs=1e-6)


def test_tiny_hpm_unchanged():
    init_default_scope('mmpretrain')
    _check(run(tiny()), TINY)


def test_half_resolution_teacher_unchanged():
    init_default_scope('mmpretrain')
    _check(run(tiny(input_scale=0.5)), TINY_HALFRES)


def test_fashion_mnist_configs_unchanged():
    """The main job's model and its MAE twin: same initial weights and the
    same first three steps as before the configs shared their bases."""
    hpm, param_sum = from_config(FMNIST_CFG)
    assert param_sum == pytest.approx(FMNIST_HPM_PARAM_SUM, rel=1e-9)
    _check(run(hpm, steps=3, batch=8, size=32), FMNIST_HPM)
    mae, param_sum = from_config(MAE_CFG)
    assert param_sum == pytest.approx(FMNIST_MAE_PARAM_SUM, rel=1e-9)
    losses = [float(log['loss']) for log in run(mae, steps=3, batch=8,
                                                size=32)]
    assert losses == pytest.approx(FMNIST_MAE, rel=1e-5)
