"""The non-finite guard of the optimizer wrappers: one depth for every
model (HPM and mmpretrain's MAE alike) and every wrapper."""

import re

import pytest
import torch
import torch.nn as nn
from helpers import FMNIST_CFG, tiny_config
from mmengine.logging import MessageHub
from mmengine.optim import build_optim_wrapper

import hpm_mm  # noqa: F401

WRAPPERS = [
    'GuardedOptimWrapper', 'AutocastOptimWrapper', 'GuardedAmpOptimWrapper'
]


def _setup(wrapper='GuardedOptimWrapper', device='cpu', fused=None, **kwargs):
    """nn.Linear(4, 2) and the wrapper on ``device``: AutocastOptimWrapper
    autocasts to bf16 there, GuardedAmpOptimWrapper (CUDA only) is fp16
    with a dynamic loss scale; AdamW fused or not (``fused``)."""
    device = torch.device(device)
    if wrapper == 'GuardedAmpOptimWrapper':
        if device.type != 'cuda':
            pytest.skip('fp16 with a loss scaler: CUDA only (mmengine)')
        kwargs.update(dtype='float16', loss_scale='dynamic')
    elif wrapper == 'AutocastOptimWrapper':
        kwargs.update(device_type=device.type)
    torch.manual_seed(0)
    model = nn.Linear(4, 2).to(device)
    optim = build_optim_wrapper(
        model,
        dict(
            type=wrapper,
            optimizer=dict(type='AdamW', lr=0.1, fused=fused),
            **kwargs))
    return model, optim


def _state(model, optim):
    return ({
        k: v.clone()
        for k, v in model.state_dict().items()
    }, {
        k: {
            n: t.clone()
            for n, t in s.items()
        }
        for k, s in optim.optimizer.state.items()
    })


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('fused', [None, True])
@pytest.mark.parametrize('wrapper', WRAPPERS)
@pytest.mark.parametrize('bad', ['inf_grad', 'nan_loss'])
def test_bad_step_is_skipped_weights_and_state_untouched(
        wrapper, bad, device, fused):
    """Skipped by the guard, the fused AdamW (a CUDA run's, with the loss
    scale it reads on the device) as the multi-tensor one."""
    model, optim = _setup(wrapper, device, fused)
    x = torch.randn(3, 4, device=device)

    def good_step():
        with optim.optim_context(model):
            loss = model(x).float().pow(2).mean()
        optim.update_params(loss)

    good_step()  # one good step: Adam state
    before = _state(model, optim)
    scaler = getattr(optim, 'loss_scaler', None)
    scale = scaler.get_scale() if scaler is not None else None
    hub = MessageHub.get_current_instance()
    optim.flush()  # the fused step's flag waits on the device until read
    assert hub.get_scalar('train/nonfinite_skipped').current() == 0.
    if bad == 'inf_grad':  # a finite loss whose gradient overflows
        handle = model.weight.register_hook(lambda g: g * float('inf'))
        loss = model(x).pow(2).mean()
        assert torch.isfinite(loss)
    else:
        loss = model(x * float('nan')).sum()
    optim.update_params(loss)
    if bad == 'inf_grad':
        handle.remove()
    after = _state(model, optim)
    assert _same(before[0], after[0])
    assert all(_same(before[1][k], after[1][k]) for k in before[1])
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    assert optim.skipped_steps == 1 and optim.consecutive_skips == 1
    assert hub.get_scalar('train/nonfinite_skipped').current() == 1.
    if scaler is not None:  # the dynamic loss scale went down
        assert scaler.get_scale() < scale
    good_step()  # training goes on
    assert not _same(before[0], _state(model, optim)[0])
    assert optim.applied_steps == 2 and optim.consecutive_skips == 0


def test_consecutive_skips_stop_training_with_one_clear_error():
    model, optim = _setup(max_consecutive_skips=3)
    x = torch.randn(3, 4) * float('nan')
    for _ in range(2):
        optim.update_params(model(x).sum())
    from hpm_mm.errors import HPMError
    with pytest.raises(
            HPMError, match=r'3 optimizer steps in a row.*'
            r'lower optimizer.lr'):
        optim.update_params(model(x).sum())


def test_guard_can_be_switched_off():
    model, optim = _setup(skip_nonfinite=False)
    optim.update_params(model(torch.randn(3, 4) * float('nan')).sum())
    assert not torch.isfinite(model.weight).all()


def test_gradient_clipping_sees_only_finite_gradients():
    """The check runs before clipping: a skipped step logs no grad norm."""
    model, optim = _setup(clip_grad=dict(max_norm=1.0))
    hub = MessageHub.get_current_instance()
    optim.update_params(model(torch.randn(3, 4)).sum())
    norm = hub.get_scalar('train/grad_norm').current()
    optim.update_params(model(torch.randn(3, 4) * float('nan')).sum())
    assert hub.get_scalar('train/grad_norm').current() == norm


@pytest.mark.parametrize('wrapper', WRAPPERS)
def test_per_parameter_clipping_is_dinos(wrapper, device):
    """clip_grad type 'param_norm' (DINO/iBOT): each gradient scaled by
    max_norm / (norm + 1e-6) where that is below 1, on its own (after
    unscaling under fp16)."""
    model, optim = _setup(
        wrapper, device, clip_grad=dict(type='param_norm', max_norm=1.0))
    captured = {}
    step = optim.optimizer.step
    optim.optimizer.step = lambda *a, **k: captured.update({
        n: p.grad.clone()
        for n, p in model.named_parameters()
    }) or step()
    x = torch.randn(3, 4, device=device) * 100  # weight grad > 1, bias < 1
    loss = model(x).sum() * 0.01
    raw = torch.autograd.grad(loss, list(model.parameters()))
    optim.update_params(model(x).sum() * 0.01)
    for (name, _), g in zip(model.named_parameters(), raw):
        n = g.norm()
        want = g * (1. / (n + 1e-6)) if n > 1 else g
        torch.testing.assert_close(captured[name], want, rtol=1e-4, atol=1e-6)
    assert raw[0].norm() > 1 > raw[1].norm()
    hub = MessageHub.get_current_instance()
    assert hub.get_scalar('train/grad_norm_max').current() == pytest.approx(
        float(raw[0].norm()))


def test_mae_baseline_is_guarded_too():
    """mmpretrain's own MAE (the baseline configs) through the same wrapper:
    a NaN batch leaves every weight as it was."""
    from helpers import tiny_mae
    model = tiny_mae(num_layers=1)
    optim = build_optim_wrapper(
        model,
        dict(type='GuardedOptimWrapper', optimizer=dict(type='AdamW', lr=0.1)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train_step(
        dict(
            inputs=torch.randn(2, 1, 16, 16) * float('nan'),
            data_samples=None), optim)
    assert _same(before, model.state_dict())
    assert optim.skipped_steps == 1


@pytest.mark.parametrize('fused', [False, True])
def test_runaway_learning_rate_stops_with_one_clear_error(tmp_path, fused):
    """lr 1e6: the first step is applied, every later one is non-finite and
    skipped; after max_consecutive_skips training stops (exit != 0) instead
    of saving NaN checkpoints and exiting 0, saying how to get back; with
    the fused AdamW (flags read at the logging interval) as without."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    work = tmp_path / 'work'
    from helpers import train

    from hpm_mm.errors import HPMError
    with pytest.raises(HPMError) as failed:
        train(
            cfg,
            work,
            cfg_options={
                'optim_wrapper.optimizer.lr': 1e6,
                'optim_wrapper.max_consecutive_skips': 3,
                'optim_wrapper.optimizer.fused': fused,
                'train_cfg.max_epochs': 4
            })
    out = str(failed.value) + open(next(work.glob('*/*.log'))).read()
    assert '3 optimizer steps in a row had a non-finite loss' in out
    assert re.search('optimizer steps? skipped on every rank', out)
    # the first, finite step already wrecked the weights: the message
    # does not vouch for them and points away from --resume's old lr
    assert 'checkpoint is sound' not in out and 'load_from=CKPT' in out
    for path in work.glob('epoch_*.pth'):  # whatever was saved is finite
        sd = torch.load(path, map_location='cpu')['state_dict']
        assert all(
            torch.isfinite(v).all() for v in sd.values()
            if v.is_floating_point()), path


def test_fused_adamw_trains_as_foreach(device):
    """AdamW's fused kernel (what a CUDA run takes) and its multi-tensor
    loop give the same HPM weights after a few guarded steps."""
    import copy

    from helpers import tiny_hpm, tiny_step_setup
    weights = []
    for fused in (False, True):
        model = tiny_hpm(device, seed=0)
        optim, data = tiny_step_setup(
            model,
            device,
            lr=1e-3,
            weight_decay=0.05,
            betas=(0.9, 0.95),
            # eps above rounding noise: directions the losses ignore (the
            # attention's key bias, a shift of every predicted score) get
            # gradients of rounding noise alone, which Adam with a tiny
            # eps scales up to lr-sized steps of either sign
            eps=1e-4,
            fused=fused,
            foreach=not fused)
        torch.manual_seed(1)  # the same masks
        for _ in range(4):
            model.train_step(copy.copy(data), optim)
        weights.append(model.state_dict())
    foreach, fused = weights
    for key in foreach:
        torch.testing.assert_close(
            fused[key],
            foreach[key],
            rtol=1e-5,
            atol=1e-6,
            msg=lambda m, key=key: key + m)
