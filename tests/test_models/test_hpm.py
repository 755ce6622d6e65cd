import copy
from unittest import mock

import pytest
import torch
from helpers import autocast_dtypes, tiny_hpm

import hpm_mm  # noqa: F401


def test_loss_keys_and_values(device):
    torch.manual_seed(0)
    model = tiny_hpm(device=device)
    model.set_progress(0.5, epoch=3)
    losses = model.loss(torch.randn(4, 1, 16, 16, device=device), [])
    assert set(losses) == {
        'loss_rec', 'loss_pred', 'rank_acc', 'alpha', 'num_hard'
    }
    assert all(torch.isfinite(v) for v in losses.values())
    assert float(losses['alpha']) == 0.5
    assert float(losses['num_hard']) == 6  # floor(0.5 * 12)
    assert 0 <= float(losses['rank_acc']) <= 1
    # mmengine sums exactly the two losses
    _, log_vars = model.parse_losses(losses)
    assert torch.isclose(log_vars['loss'],
                         losses['loss_rec'] + losses['loss_pred'])


def test_gradients_reach_student_never_teacher(device):
    torch.manual_seed(0)
    model = tiny_hpm(device=device)
    model.set_progress(0.5)
    losses = model.loss(torch.randn(4, 1, 16, 16, device=device), [])
    losses['loss_pred'].backward(retain_graph=True)
    # L_pred trains the predictor trunk and, through it, the encoder
    assert model.neck.predictor.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    assert model.backbone.layers[0].attn.qkv.weight.grad.abs().sum() > 0
    assert model.neck.decoder_embed.weight.grad.abs().sum() > 0
    # ... but not the reconstructor's own trunk
    assert model.neck.decoder_blocks[0].attn.qkv.weight.grad is None
    losses['loss_rec'].backward()
    assert model.neck.decoder_blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    for name, p in model.teacher.named_parameters():
        assert not p.requires_grad and p.grad is None, name


def test_teacher_skipped_when_k_is_zero(device):
    model = tiny_hpm(
        device=device,
        mask_generator=dict(type='HPMMaskGenerator', alpha_0=0., alpha_T=0.5))
    x = torch.randn(2, 1, 16, 16, device=device)
    with mock.patch.object(  # the teacher's encoder pass
            model.teacher,
            '_pass',
            wraps=model.teacher._pass) as spy:
        model.set_progress(0.)  # K = 0
        model.loss(x, [])
        assert spy.call_count == 0
        model.set_progress(1.)  # K = 6
        model.loss(x, [])
        assert spy.call_count == 1
    # random masking throughout builds no teacher at all
    assert tiny_hpm(
        mask_generator=dict(type='HPMMaskGenerator', alpha_0=0.,
                            alpha_T=0.)).teacher is None


def test_ema_update_matches_formula_and_momentum_schedule(device):
    torch.manual_seed(0)
    model = tiny_hpm(
        teacher=dict(momentum=1e-3, end_momentum=1e-4, momentum_epochs=100),
        device=device)
    x = torch.randn(2, 1, 16, 16, device=device)
    model.set_progress(0.5, epoch=0)
    model.loss(x, [])  # first update copies the student
    student = dict(model.backbone.named_parameters())
    teacher = dict(model.teacher.module['backbone'].named_parameters())
    for k in student:
        assert torch.equal(student[k], teacher[k])
    # move the student, then one more update
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p))
    before = {k: v.clone() for k, v in teacher.items()}
    model.set_progress(0.5, epoch=50)
    m = 1e-3 + 0.5 * (1e-4 - 1e-3)
    assert model.teacher.momentum == pytest.approx(m)
    model.loss(x, [])
    for k in student:
        want = (1 - m) * before[k] + m * student[k]
        assert torch.allclose(teacher[k], want, atol=1e-6), k
    model.set_progress(1., epoch=300)
    assert model.teacher.momentum == pytest.approx(1e-4)
    model.set_progress(0.5, epoch=50.9)  # the linear ramp: whole epochs
    assert model.teacher.momentum == pytest.approx(m)


def test_cosine_momentum_follows_ibot_and_teacher_stays_in_eval():
    """iBOT's teacher: decay 1 - (1 - 0.996) (1 + cos(pi t / T)) / 2 at
    every iteration; the averaged model runs without drop path."""
    import math
    model = tiny_hpm(
        teacher=dict(
            momentum=4e-3,
            end_momentum=0.,
            momentum_epochs=10,
            momentum_schedule='cosine'))
    for epoch in (0., 2.5, 5., 9.99, 12.):
        model.set_progress(0.5, epoch=epoch)
        t = min(epoch / 10, 1.)
        decay = 1 - (1 - 0.996) * (1 + math.cos(math.pi * t)) / 2
        assert 1 - model.teacher.momentum == pytest.approx(decay)
    model.train()
    assert model.training and model.backbone.training
    assert not model.teacher.module.training
    with pytest.raises(ValueError, match="'linear' or 'cosine'"):
        tiny_hpm(teacher=dict(momentum_schedule='step'))


def test_a_sharded_student_parameter_is_refused_in_one_line():
    """The EMA teacher averages whole parameters: a student parameter of
    another shape (an FSDP shard) is refused, naming it, at the first
    update after a build or a load, and nothing is averaged."""
    import re
    model = tiny_hpm()
    before = copy.deepcopy(model.teacher.state_dict())
    student = copy.deepcopy(model.student())
    name, param = next(iter(student.named_parameters()))
    param.data = param.data[..., :1]
    with pytest.raises(RuntimeError, match=re.escape(name) + ' is .*shard'):
        model.teacher.update(student)
    for key, value in model.teacher.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert model.teacher.update(model.student())  # whole: averaged


def test_teacher_scores_use_full_image_and_predictor_only(device):
    model = tiny_hpm(device=device)
    model.teacher.update(model.student())
    x = torch.randn(3, 1, 16, 16, device=device)
    neck = model.teacher.module['scorer']  # HPM's decoder
    with mock.patch.object(
            neck, 'reconstruct',
            side_effect=AssertionError('reconstructor ran')):
        scores = model.teacher(x).scores
    assert scores.shape == (3, 16)
    # same as the student's predictor on the unmasked image
    latent, ids = model.backbone(x, torch.zeros(3, 16, device=device), 16)
    with torch.no_grad():
        ref = model.neck.predictor(model.neck.embed(latent, ids))
    assert torch.allclose(scores, ref, atol=1e-5)


def test_backbone_masking_matches_manual_gather():
    model = tiny_hpm()
    x = torch.randn(2, 1, 16, 16)
    mask = torch.zeros(2, 16)
    mask[0, [0, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15]] = 1
    mask[1, 4:] = 1
    latent, ids_restore = model.backbone(x, mask)  # counts visible itself
    assert latent.shape == (2, 5, 32)
    # visible tokens in raster order, then the decoder restores raster order
    vis0 = (mask[0] == 0).nonzero().flatten().tolist()
    assert vis0 == [1, 2, 4, 14]
    shuffle = torch.argsort(ids_restore, 1)
    assert shuffle[0, :4].tolist() == vis0
    assert shuffle[1, :4].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match='mask must be'):
        model.backbone(x, torch.zeros(2, 15))


def test_wrong_image_size_is_a_clear_error():
    model = tiny_hpm()
    with pytest.raises(ValueError, match='got .*Fix: images of 16x16'):
        model.loss(torch.randn(2, 1, 32, 32), [])


def test_extract_feat_unmasked():
    model = tiny_hpm()
    feats = model.extract_feat(torch.randn(2, 1, 16, 16))
    assert feats[0].shape == (2, 17, 32)


def test_absolute_loss_config_and_no_predictor_head():
    model = tiny_hpm(
        head=dict(
            type='HPMPretrainHead',
            patch_size=4,
            in_channels=1,
            loss_pred=dict(type='HPMAbsoluteLoss')))
    model.set_progress(1.)
    assert torch.isfinite(
        model.loss(torch.randn(2, 1, 16, 16), [])['loss_pred'])


def test_teacher_bf16_ranks_like_fp32(device):
    torch.manual_seed(0)
    model = tiny_hpm(device=device)
    model.teacher.update(model.student())
    x = torch.randn(4, 1, 16, 16, device=device)
    ref = model.teacher(x).scores
    model.teacher.dtype = torch.bfloat16
    fast = model.teacher(x).scores
    assert fast.dtype == torch.float32
    from hpm_mm.visualization import spearman
    assert float(spearman(fast, ref).mean()) > 0.9


def test_low_resolution_teacher_matches_a_native_small_model(device):
    """teacher input_scale=0.5: the teacher sees the 8x8 downsampled image
    (2x2 patches) and its scores are upsampled to 4x4. Reference: a model
    built natively for 8x8 images, given the same weights with the position
    embeddings interpolated, run on the same downsampled image."""
    import torch.nn.functional as F
    from mmpretrain.models.utils import resize_pos_embed
    torch.manual_seed(0)
    model = tiny_hpm(teacher=dict(input_scale=0.5), device=device)
    assert model.teacher.grid == (2, 2)
    model.teacher.update(model.student())
    x = torch.randn(3, 1, 16, 16, device=device)
    seen = []
    layer = model.teacher.module['backbone'].layers[0]
    handle = layer.register_forward_hook(
        lambda m, i, o: seen.append(i[0].shape[1]))
    scores = model.teacher(x).scores
    handle.remove()
    assert scores.shape == (3, 16) and seen == [1 + 4]

    small = tiny_hpm(img_size=8, device=device)
    state = copy.deepcopy(model.teacher.module.state_dict())
    state['backbone.pos_embed'] = resize_pos_embed(state['backbone.pos_embed'],
                                                   (4, 4), (2, 2), 'bicubic',
                                                   1)
    state['scorer.decoder_pos_embed'] = resize_pos_embed(
        state['scorer.decoder_pos_embed'], (4, 4), (2, 2), 'bicubic', 1)
    small.student().load_state_dict(state)
    small_x = F.interpolate(
        x, size=(8, 8), mode='bilinear', align_corners=False, antialias=True)
    with torch.no_grad():
        latent, ids = small.backbone(small_x, torch.zeros(3, 4, device=device),
                                     4)
        ref = small.neck.predictor(small.neck.embed(latent, ids))
    ref = F.interpolate(
        ref.view(3, 1, 2, 2),
        size=(4, 4),
        mode='bilinear',
        align_corners=False).flatten(1)
    assert torch.allclose(scores, ref, atol=1e-5)
    # and the whole step runs with it
    model.set_progress(1.)
    assert torch.isfinite(model.loss(x, [])['loss_rec'])


def test_teacher_input_scale_and_decoder_grid_errors():
    """A decoder built for another patch count than the encoder's is
    refused at build (it stopped the first step)."""
    with pytest.raises(ValueError, match=r'input_scale must be in'):
        tiny_hpm(teacher=dict(input_scale=0.))
    with pytest.raises(ValueError, match=r'neck.num_patches=16\.'):
        tiny_hpm(neck=dict(num_patches=9))


def test_teacher_follows_the_step_autocast_unless_told(device):
    """Under AMP the teacher runs in the autocast dtype (teacher_dtype None);
    teacher_dtype forces its own dtype; its scores are fp32."""
    model = tiny_hpm(device=device)
    model.teacher.update(model.student())
    seen = []
    layer = model.teacher.module['backbone'].layers[0].attn.qkv
    layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    x = torch.randn(2, 1, 16, 16, device=device)
    model.teacher(x)
    assert seen == [torch.float32]
    for dtype in autocast_dtypes(device):
        with torch.autocast(device.type, dtype=dtype):
            scores = model.teacher(x).scores
        assert seen[-1] == dtype
        assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
    model.teacher.dtype = torch.bfloat16
    model.teacher(x)
    assert seen[-1] == torch.bfloat16


def test_cls_attention_scores_match_brute_force(device):
    """AttentionMaskGenerator's scores: the teacher's last-block CLS-to-patch
    attention, mean over heads, read off the same encoder pass."""
    import torch.nn.functional as F
    model = tiny_hpm(
        mask_generator=dict(
            type='AttentionMaskGenerator', alpha_0=0.5, alpha_T=0.5),
        device=device)
    assert model.teacher.score_source == 'cls_attention'
    model.teacher.update(model.student())
    x = torch.randn(3, 1, 16, 16, device=device)
    seen = []
    last = model.teacher.module['backbone'].layers[-1]
    last.ln1.register_forward_hook(lambda m, i, o: seen.append(o))
    predictor = model.teacher.module['scorer'].predictor
    with mock.patch.object(
            predictor, 'forward', side_effect=AssertionError('predictor ran')):
        scores = model.teacher(x).scores
    attn = last.attn
    q, k, _ = attn.qkv(seen[0]).view(3, 17, 3, attn.num_heads,
                                     attn.head_dims).unbind(2)
    full = F.softmax(
        torch.einsum('bihd,bjhd->bhij', q, k) / attn.head_dims**.5,
        dim=-1)  # (B, H, L, L)
    want = full[:, :, 0, 1:].mean(1)
    assert scores.shape == (3, 16)
    assert torch.allclose(
        scores, want, atol=1e-6 if device.type == 'cpu' else
        1e-5)  # CUDA's softmax/matmul reduction order
    assert torch.allclose(
        scores.sum(1) + full[:, :, 0, 0].mean(1),
        torch.ones(3, device=device),
        atol=1e-5)
    model.set_progress(1.)
    assert torch.isfinite(model.loss(x, [])['loss_rec'])


@pytest.mark.parametrize('fused', [False, True])
def test_teacher_updates_once_per_optimizer_step(device, fused):
    """The teacher follows applied optimizer steps only: not after a step
    the guard skipped, once per step under gradient accumulation; with a
    fused optimizer (the flag stays on the device) as with another."""
    from mmengine.optim import build_optim_wrapper

    import hpm_mm.engine  # noqa: F401
    model = tiny_hpm(device=device)
    model.set_progress(0.5)
    optim = build_optim_wrapper(
        model,
        dict(
            type='GuardedOptimWrapper',
            accumulative_counts=2,
            optimizer=dict(type='AdamW', lr=0.1, fused=fused)))
    x = torch.randn(2, 1, 16, 16, device=device)
    data = dict(inputs=x, data_samples=None)
    steps = []
    for i in range(6):
        # what HPMScheduleHook pushes before every iteration
        model.set_progress(
            0.5, optim_steps=optim.step_calls, applied=optim.last_applied)
        batch = dict(inputs=x * float('nan'), data_samples=None) \
            if i in (2, 3) else data
        model.train_step(batch, optim)
        steps.append(int(model.teacher.steps))
    # 1st call copies; iters 0-1 = step 1 (applied), 2-3 = step 2 (NaN,
    # skipped), 4-5 = step 3 (applied)
    assert steps == [1, 1, 2, 2, 2, 2]
    assert optim.skipped_steps == 1 and optim.applied_steps == 2
    # without the count (no hook, or another optimizer wrapper): every call
    model.set_progress(0.5)
    model.train_step(data, optim)
    model.train_step(data, optim)
    assert int(model.teacher.steps) == 4


def _amp_wrapper(model, dtype, device):
    """The optimizer wrapper ``--amp`` gives: fp16 with a dynamic loss scale
    on CUDA (mmengine's AmpOptimWrapper, guarded), bf16 autocast else."""
    from mmengine.optim import build_optim_wrapper
    cfg = dict(
        type='AutocastOptimWrapper', dtype='bfloat16', device_type=device.type)
    if dtype == torch.float16:
        cfg = dict(
            type='GuardedAmpOptimWrapper',
            dtype='float16',
            loss_scale='dynamic')
    return build_optim_wrapper(
        model, dict(optimizer=dict(type='AdamW', lr=1e-3), **cfg))


def test_amp_step_keeps_losses_fp32(device):
    """A whole HPM train_step under each AMP dtype of the device: the
    student runs in the AMP dtype, the per-patch losses, L_rec, the
    relative L_pred and the teacher's scores are fp32 and finite, every
    trained parameter moves and the teacher follows."""
    from hpm_mm.models.heads import HPMPretrainHead
    for dtype in autocast_dtypes(device):
        torch.manual_seed(0)
        model = tiny_hpm(device=device)
        model.set_progress(0.5)
        optim = _amp_wrapper(model, dtype, device)
        seen = {}
        qkv = model.backbone.layers[0].attn.qkv
        qkv.register_forward_hook(lambda m, i, o: seen.update(student=o.dtype))
        patch, run = HPMPretrainHead.patch_losses, type(model.teacher).forward

        def record(key, fn, pick=lambda out: out):

            def call(*args, **kwargs):
                out = fn(*args, **kwargs)
                seen[key] = pick(out)
                return out

            return call

        teacher_run = record('scores', run, lambda out: out[0])
        with mock.patch.object(
                HPMPretrainHead,
                'patch_losses',
                autospec=True,
                side_effect=record('per_patch', patch)):
            with mock.patch.object(
                    type(model.teacher),
                    'forward',
                    autospec=True,
                    side_effect=teacher_run):
                before = {
                    n: p.detach().clone()
                    for n, p in model.named_parameters() if p.requires_grad
                }
                data = dict(
                    inputs=torch.randn(4, 1, 16, 16, device=device),
                    data_samples=None)
                for _ in range(2):  # 1st copies the teacher, 2nd scores
                    log = model.train_step(dict(data), optim)
        assert seen['student'] == dtype
        for key in ('per_patch', 'scores'):
            assert seen[key].dtype == torch.float32, key
            assert torch.isfinite(seen[key]).all(), key
        for key in ('loss_rec', 'loss_pred', 'loss'):
            assert log[key].dtype == torch.float32 and torch.isfinite(
                log[key]), key
        assert optim.skipped_steps == 0
        moved = [
            n for n, p in model.named_parameters()
            if p.requires_grad and not torch.equal(p, before[n])
        ]
        assert len(moved) == len(before), set(before) - set(moved)
        assert int(model.teacher.steps) == 2


def test_unknown_arguments_are_refused():
    with pytest.raises(TypeError, match='teacher_momentum'):
        tiny_hpm(teacher_momentum=0.5)


def test_every_mask_generator_trains_in_hpm(device):
    x = torch.randn(2, 1, 16, 16, device=device)
    for gen in ('RandomMaskGenerator', 'BlockwiseMaskGenerator',
                'AttentionMaskGenerator', 'HPMMaskGenerator'):
        model = tiny_hpm(
            mask_generator=dict(type=gen, mask_ratio=0.5), device=device)
        assert (model.teacher is None) == (
            gen in ('RandomMaskGenerator', 'BlockwiseMaskGenerator'))
        model.set_progress(1.)
        losses = model.loss(x, [])
        assert torch.isfinite(losses['loss_rec'] + losses['loss_pred'])


def test_mask_ratio_masking_every_patch_is_refused_at_build():
    with pytest.raises(ValueError, match=r'masks 16 of 16 .*\[0.0625, 0.938'):
        tiny_hpm(mask_generator=dict(type='HPMMaskGenerator', mask_ratio=0.97))


@pytest.mark.parametrize('by_epoch,progress', [(True, 0.3), (False, 26 / 80)])
@pytest.mark.parametrize('loop', ['EpochBasedTrainLoop', 'IterBasedTrainLoop'])
def test_schedule_hook_pushes_progress_and_fractional_epoch(
        by_epoch, progress, loop):
    """t/T for the mask, epochs done with the fraction of the current one
    for the teacher (iteration 2 of 8 in epoch 3), the applied steps and
    the run's length in epochs."""
    from types import SimpleNamespace

    import mmengine.runner

    from hpm_mm.engine.hooks import HPMScheduleHook
    got = []
    runner = SimpleNamespace(
        model=SimpleNamespace(set_progress=lambda *a: got.append(a)),
        train_loop=mock.Mock(spec=getattr(mmengine.runner, loop)),
        epoch=3,
        max_epochs=10,
        iter=3 * 8 + 2,
        max_iters=80,
        train_dataloader=[None] * 8,
        optim_wrapper=SimpleNamespace(step_calls=25, last_applied=1.),
        message_hub=mock.Mock())
    HPMScheduleHook(by_epoch=by_epoch).before_train_iter(runner, 2)
    assert got == [(pytest.approx(progress), 3.25, 25, 10, 1.)]


def test_image_scores_need_no_teacher_and_drive_the_mask(device):
    """A generator with score_source='image' (test_mask_generators'
    PatchStdMaskGenerator): no EMA teacher is built or updated, the mask
    holds the K patches of highest image score, the student's predictor
    still learns to rank, and the pictures show the scores the mask read."""
    from test_mask_generators import PatchStdMaskGenerator  # noqa: F401

    from hpm_mm.visualization import analyze_hard_patches
    torch.manual_seed(0)
    model = tiny_hpm(
        device=device,
        mask_generator=dict(
            type='PatchStdMaskGenerator',
            mask_ratio=0.75,
            alpha_0=0.5,
            alpha_T=0.5))
    assert model.teacher is None
    x = torch.randn(4, 1, 16, 16, device=device)
    x[:, :, :4, :4] *= 10  # patch 0 of every image has the top contrast
    model.set_progress(1.)
    want = model.mask_generator.image_scores(x, (4, 4))
    torch.testing.assert_close(model.mask_scores(x), want)
    seen = {}
    real = model.choose_mask

    def spy(scores, inputs):
        seen['scores'] = scores
        seen['mask'] = real(scores, inputs)
        return seen['mask']

    with mock.patch.object(model, 'choose_mask', side_effect=spy):
        losses = model.loss(x, [])
    torch.testing.assert_close(seen['scores'], want)
    top = want.topk(6, dim=1).indices  # K = floor(0.5 * 12)
    assert torch.all(seen['mask'].gather(1, top) == 1)
    assert torch.isfinite(losses['loss_pred']) and 'rank_acc' in losses
    result = analyze_hard_patches(model, x, 1.0, num_masks=2)
    assert result['shown_name'] == 'image scores'
    torch.testing.assert_close(result['shown'], want.float().cpu())
    assert result['pred_loss'].shape == (4, 16)  # the student's predictor


def test_image_scores_with_the_ema_feature_target(device):
    """Image scores and the EMA teacher's features as the target: the
    teacher is built for the features only and never scores."""
    from test_mask_generators import PatchStdMaskGenerator  # noqa: F401
    model = tiny_hpm(
        device=device,
        mask_generator=dict(
            type='PatchStdMaskGenerator', alpha_0=0.5, alpha_T=0.5),
        target_generator=dict(type='EMATeacherTarget'),
        head=dict(type='HPMFeaturePretrainHead'),
        neck=dict(predict_feature_dim=32))
    assert model.teacher is not None and model.teacher.score_source is None
    model.set_progress(1.)
    x = torch.randn(2, 1, 16, 16, device=device)
    real, outs = type(model.teacher).forward, []

    def forward(*args, **kwargs):
        outs.append(real(*args, **kwargs))
        return outs[-1]

    with mock.patch.object(
            type(model.teacher), 'forward', autospec=True,
            side_effect=forward):
        losses = model.loss(x, [])
    assert len(outs) == 1  # one pass: features, no scores
    assert outs[0].scores is None and outs[0].features is not None
    assert torch.isfinite(losses['loss_rec'])
