"""Feature targets (Tab. 1) and hard-patch mining on SimMIM / BEiT: each
head's per-patch loss is its framework's own loss, the targets and the
teacher do what they say, bad settings stop in one line."""
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_hpm_cfg
from mmpretrain.registry import MODELS

import hpm_mm  # noqa: F401

ARCH = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
# the loss predictor of the SimMIM / iBOT students
PREDICTOR = dict(
    type='HPMLossPredictor',
    embed_dim=32,
    predictor_embed_dim=16,
    predictor_depth=1,
    predictor_num_heads=2)
CLIP_TINY = dict(
    type='CLIPFeatureTarget',
    checkpoint=None,
    img_size=32,
    patch_size=8,
    width=32,
    layers=1,
    heads=2,
    output_dim=24)


def build(cfg):
    model = MODELS.build(cfg)
    model.init_weights()
    return model


def hpm_cfg(**kw):
    """helpers' tiny HPM at 32 px RGB in 8-px patches."""
    return tiny_hpm_cfg(img_size=32, patch_size=8, in_channels=3, **kw)


def feature_cfg(target, dim, **kw):
    cfg = hpm_cfg(
        target_generator=target,
        head=dict(type='HPMFeaturePretrainHead'),
        **kw)
    cfg['neck'] = dict(cfg['neck'], predict_feature_dim=dim)
    return cfg


def simmim_cfg(**kw):
    cfg = dict(
        type='HPMSimMIM',
        backbone=dict(
            type='MaskTokenViT', arch=ARCH, img_size=32, patch_size=8),
        neck=dict(type='HPMSimMIMDecoder', in_channels=32, encoder_stride=8),
        head=dict(type='HPMSimMIMHead', patch_size=8),
        predictor=PREDICTOR,
        mask_generator=dict(
            type='HPMMaskGenerator', mask_ratio=0.6, alpha_0=0.5, alpha_T=0.5))
    cfg.update(kw)
    return cfg


def beit_cfg(**kw):
    cfg = simmim_cfg(
        type='HPMBEiT',
        neck=None,
        head=dict(type='HPMBEiTHead', embed_dims=32, num_embed=64),
        target_generator=dict(type='DALL-E', n_hid=8, vocab_size=64),
        mask_generator=dict(
            type='HPMMaskGenerator',
            mask_ratio=0.4,
            alpha_0=0.5,
            alpha_T=0.5,
            rest=dict(type='BlockwiseMaskGenerator', min_num_patches=2)))
    cfg.update(kw)
    return cfg


def random_mask(B=3, N=16, k=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(B, N, generator=g).argsort(1)[:, :k]
    return torch.zeros(B, N).scatter_(1, ids, 1.)


# ---- per-patch losses = the frameworks' own losses -------------------------


def test_feature_head_is_milan_cosine_loss_per_patch():
    torch.manual_seed(0)
    pred, target, mask = torch.randn(3, 16, 24), torch.randn(3, 16, 24), \
        random_mask()
    head = MODELS.build(dict(type='HPMFeaturePretrainHead'))
    per_patch = head.patch_losses(pred, target)
    # brute force: l2-normalise, MSE over channels
    want = torch.stack([
        torch.stack([((pred[b, i] / pred[b, i].norm() -
                       target[b, i] / target[b, i].norm())**2).mean()
                     for i in range(16)]) for b in range(3)
    ])
    torch.testing.assert_close(per_patch, want)
    milan = MODELS.build(
        dict(type='CosineSimilarityLoss', shift_factor=2.0, scale_factor=2.0))
    losses = head.loss(pred, torch.randn(3, 16), target, mask)
    torch.testing.assert_close(losses['loss_rec'] * 24,
                               milan(pred, target, mask))
    assert set(losses) == {'loss_rec', 'loss_pred', 'rank_acc'}
    with pytest.raises(ValueError, match='predict_feature_dim=24'):
        head.patch_losses(torch.randn(3, 16, 8), target)


def test_simmim_head_is_simmim_loss_per_patch():
    torch.manual_seed(0)
    pred, imgs = torch.randn(3, 3, 32, 32), torch.randn(3, 3, 32, 32)
    mask = random_mask()
    head = MODELS.build(dict(type='HPMSimMIMHead', patch_size=8))
    per_patch = head.patch_losses(pred, imgs)
    p = (pred - imgs).abs()
    assert per_patch[1, 5] == pytest.approx(
        float(p[1, :, 8:16, 8:16].mean()), rel=1e-5)  # patch (1, 1)
    losses = head.loss(pred, torch.randn(3, 16), imgs, mask)
    own = head.loss_module(  # SimMIMHead.loss with the (B, h, w) mask
        pred, imgs,
        mask.view(3, 4,
                  4).repeat_interleave(8, 1).repeat_interleave(8,
                                                               2).unsqueeze(1))
    torch.testing.assert_close(losses['loss_rec'], own)


def test_beit_head_is_beit_loss_per_patch():
    torch.manual_seed(0)
    head = MODELS.build(dict(type='HPMBEiTHead', embed_dims=32, num_embed=64))
    feats, tokens = torch.randn(3, 17, 32), torch.randn(3, 64, 4, 4)
    mask = random_mask()
    per_patch = head.patch_losses(feats, tokens, mask)
    ids = tokens.argmax(1).flatten(1)
    logits = head.cls_head(feats[:, 1:])
    want = F.cross_entropy(
        logits.flatten(0, 1), ids.flatten(), reduction='none').view(3,
                                                                    16) * mask
    torch.testing.assert_close(per_patch, want)
    losses = head.loss(feats, torch.randn(3, 16), tokens, mask)
    own = super(type(head), head).loss(feats, tokens, mask.view(3, 4, 4))
    torch.testing.assert_close(losses['loss_rec'], own)


# ---- targets ----------------------------------------------------------------


def test_ema_target_is_the_teachers_full_image_features():
    torch.manual_seed(0)
    # random masks: the teacher is built for the target alone
    model = build(
        feature_cfg(
            dict(type='EMATeacherTarget'),
            32,
            mask_generator=dict(
                type='HPMMaskGenerator', alpha_0=0., alpha_T=0.)))
    assert model.teacher is not None
    x = torch.randn(2, 3, 32, 32)
    model.set_progress(0.)
    seen = {}
    head_loss = model.head.loss
    model.head.loss = lambda *a: seen.setdefault('a', a) and head_loss(*a)
    model.loss(x, [])
    teacher = model.teacher.module['backbone']
    full = teacher(x, torch.zeros(2, 16), 16)[0][:, 1:]
    torch.testing.assert_close(seen['a'][2], full)
    plain = teacher(x)[0][:, 1:]  # the ViT forward: same tokens
    torch.testing.assert_close(seen['a'][2], plain, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match='input_scale=1.0'):
        build(
            feature_cfg(
                dict(type='EMATeacherTarget'),
                32,
                teacher=dict(type='EMATeacher', input_scale=0.5)))


@pytest.mark.parametrize('target,dim', [(dict(
    type='ViTFeatureTarget',
    checkpoint=None,
    arch=ARCH,
    img_size=32,
    patch_size=8), 32), (CLIP_TINY, 24)])
def test_frozen_targets_load_stay_frozen_and_refuse_missing_weights(
        tmp_path, target, dim):
    torch.manual_seed(0)
    model = build(feature_cfg(target, dim))
    net = model.target_generator.network
    assert not any(p.requires_grad
                   for p in model.target_generator.parameters())
    model.train()
    assert not model.target_generator.training
    # weights saved as the converters write them, loaded at init_weights
    prefix = model.target_generator.prefix
    path = str(tmp_path / 'target.pth')
    state = {
        prefix + k: torch.randn_like(v)
        for k, v in net.state_dict().items()
    }
    torch.save({'state_dict': state}, path)
    loaded = build(feature_cfg(dict(target, checkpoint=path), dim))
    for k, v in loaded.target_generator.network.state_dict().items():
        assert torch.equal(v, state[prefix + k]), k
    # a file of the network's own keys (no prefix) is taken whole
    torch.save({k[len(prefix):]: v for k, v in state.items()}, path)
    bare = build(feature_cfg(dict(target, checkpoint=path), dim))
    for k, v in bare.target_generator.network.state_dict().items():
        assert torch.equal(v, state[prefix + k]), k
    torch.save({'state_dict': state}, path)
    x = torch.randn(2, 3, 32, 32)
    out = loaded.target_generator(x)
    assert out.shape == (2, 16, dim) and not out.requires_grad
    losses = loaded.loss(x, [])
    losses['loss_rec'].backward()
    assert all(p.grad is None for p in loaded.target_generator.parameters())
    with pytest.raises(FileNotFoundError, match='docs/targets.md'):
        build(
            feature_cfg(
                dict(target, checkpoint=str(tmp_path / 'no.pth')), dim))
    # a tensor missing or of another shape (another arch): one line through
    # the one strict-load rule (a shape was torch's raw RuntimeError)
    from hpm_mm.errors import HPMError
    first, last = list(state)[0], list(state)[-1]
    for name, broken, want in (
        ('missing', {
            k: v
            for k, v in state.items() if k != last
        }, 'missing'),
        ('shape', dict(state, **{first:
                                 state[first][..., :1]}), 'another shape'),
    ):
        path = str(tmp_path / f'{name}.pth')
        torch.save({'state_dict': broken}, path)
        with pytest.raises(HPMError, match=f'{want}.*docs/targets.md') as e:
            build(feature_cfg(dict(target, checkpoint=path), dim))
        assert '\n' not in str(e.value), e.value


def test_plain_rows_need_no_predictor_and_refuse_half_configs():
    plain = feature_cfg(
        CLIP_TINY, 24, mask_generator=dict(type='RandomMaskGenerator'))
    plain['neck']['predictor_depth'] = 0
    plain['head']['loss_pred'] = None
    model = build(plain)
    assert model.teacher is None and not model.with_predictor
    assert not any('predictor' in k for k in model.state_dict())
    assert set(model.loss(torch.randn(2, 3, 32, 32), [])) == {'loss_rec'}
    with pytest.raises(ValueError, match='head.loss_pred is set'):
        build(dict(plain, head=dict(type='HPMFeaturePretrainHead')))
    with pytest.raises(ValueError, match='masks by predicted loss'):
        build(dict(plain, mask_generator=dict(type='HPMMaskGenerator')))


# ---- mask-token frameworks --------------------------------------------------


def test_mask_token_vit_is_hpm_vit_on_the_full_image():
    torch.manual_seed(0)
    cfg = dict(arch=ARCH, img_size=32, patch_size=8)
    vit = build(dict(type='MaskTokenViT', **cfg))
    ref = MODELS.build(dict(type='HPMViT', **cfg))
    ref.load_state_dict(vit.state_dict(), strict=False)
    x = torch.randn(2, 3, 32, 32)
    latent, ids = vit(x, torch.zeros(2, 16))
    assert ids is None and latent.shape == (2, 17, 32)
    torch.testing.assert_close(latent, ref(x, torch.zeros(2, 16), 16)[0])
    # a masked patch sees the mask token, not its pixels
    mask = torch.zeros(2, 16)
    mask[:, 3] = 1
    x2 = x.clone()
    x2[:, :, 0:8, 24:32] = 100.  # patch 3 only
    torch.testing.assert_close(vit(x, mask)[0], vit(x2, mask)[0])


@pytest.mark.parametrize('cfg', [simmim_cfg, beit_cfg])
def test_teacher_scores_with_the_predictor_on_the_full_image(cfg):
    torch.manual_seed(0)
    model = build(cfg())
    model.set_progress(0.5)
    x = torch.randn(2, 3, 32, 32)
    inputs = [x, torch.randn(2, 3, 32, 32)] if cfg is beit_cfg else x
    losses = model.loss(inputs, [])
    assert set(losses) == {
        'loss_rec', 'loss_pred', 'rank_acc', 'alpha', 'num_hard'
    }
    t = model.teacher.module
    assert set(t) == {'backbone', 'scorer'}
    want = t['scorer'](t['backbone'](x, torch.zeros(2, 16))[0])
    torch.testing.assert_close(model.teacher(x).scores, want)
    # the predictor's loss trains predictor and encoder, never the teacher
    losses['loss_pred'].backward()
    assert model.predictor.embed.weight.grad.abs().sum() > 0
    assert model.backbone.mask_token.grad is not None
    assert all(p.grad is None for p in model.teacher.parameters())


def test_plain_frameworks_build_no_teacher():
    simmim = build(
        simmim_cfg(
            predictor=None,
            head=dict(type='HPMSimMIMHead', patch_size=8, loss_pred=None),
            mask_generator=dict(type='RandomMaskGenerator', mask_ratio=0.6)))
    assert simmim.teacher is None
    assert set(simmim.loss(torch.randn(2, 3, 32, 32), [])) == {'loss_rec'}


def test_hpm_mask_with_blockwise_rest():
    gen = MODELS.build(
        dict(
            type='HPMMaskGenerator',
            mask_ratio=0.4,
            alpha_0=0.5,
            alpha_T=0.5,
            rest=dict(type='BlockwiseMaskGenerator')))
    assert gen.rest.mask_ratio == 0.4  # inherited
    scores = torch.rand(4, 196)
    mask = gen(scores, 0.5)
    k = gen.num_hard(196, 0.5)
    assert (mask.sum(1) == gen.num_masked(196)).all() and k == 39
    top = scores.topk(k, 1).indices
    assert mask.gather(1, top).all()
    # with alpha 0 it is BEiT's block-wise mask, draw for draw
    gen0 = MODELS.build(
        dict(
            type='HPMMaskGenerator',
            mask_ratio=0.4,
            alpha_0=0.,
            alpha_T=0.,
            rest=dict(type='BlockwiseMaskGenerator')))
    block = MODELS.build(dict(type='BlockwiseMaskGenerator', mask_ratio=0.4))
    torch.manual_seed(3)
    a = gen0(None, 0., 196, 4)
    torch.manual_seed(3)
    assert torch.equal(a, block(None, 0., 196, 4))
    with pytest.raises(ValueError, match='score-free'):
        MODELS.build(
            dict(type='HPMMaskGenerator', rest=dict(type='HPMMaskGenerator')))


@pytest.mark.parametrize('target,dim', [(dict(type='EMATeacherTarget'), 32),
                                        (CLIP_TINY, 24)])
def test_hard_patch_pictures_with_feature_targets(target, dim):
    from hpm_mm.visualization.hard_patches import analyze_hard_patches
    torch.manual_seed(0)
    model = build(feature_cfg(target, dim))
    model.set_progress(0.5)
    model.loss(torch.randn(2, 3, 32, 32), [])  # the teacher copies once
    x = torch.randn(2, 3, 32, 32)
    out = analyze_hard_patches(model, x, num_masks=2)
    assert out['true_loss'].shape == (2, 16) and out['recon'].shape == x.shape
    # the true losses are feature losses ((2 - 2 cos) / C <= 4 / C), not
    # pixel errors of N(0, 1) images (~2 per pixel)
    assert 0 < out['true_loss'].max() <= 4 / dim
    # the picture shows the visible pixels, zero where masked
    m = out['mask'].view(2, 1, 4, 4).repeat_interleave(8, 2) \
        .repeat_interleave(8, 3)
    torch.testing.assert_close(out['recon'], x * (1 - m))


# ---- iBOT ------------------------------------------------------------------

IBOT_MASK = [(0., 0.), (0.1, 0.5)]


def ibot_cfg(**kw):
    cfg = dict(
        type='HPMiBOT',
        backbone=dict(
            type='MaskTokenViT',
            arch=ARCH,
            img_size=32,
            patch_size=8,
            drop_path_rate=0.1),
        neck=dict(
            type='iBOTNeck',
            in_channels=32,
            hidden_channels=48,
            bottleneck_channels=16,
            out_channels=64),
        head=dict(
            type='HPMiBOTHead', out_channels=64, warmup_teacher_temp_epochs=3),
        predictor=PREDICTOR,
        mask_generator=dict(
            type='HPMMaskGenerator',
            mask_ratio=[(0.2, 0.5)],
            alpha_0=0.5,
            alpha_T=0.5,
            rest=dict(type='BlockwiseMaskGenerator', min_num_patches=2)))
    cfg.update(kw)
    return cfg


def views(B=2, num_local=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, 3, 32, 32, generator=g) for _ in range(2)] + [
        torch.randn(B, 3, 16, 16, generator=g) for _ in range(num_local)
    ]


def ibot_reference(s_cls,
                   s_patch,
                   t_cls,
                   t_patch,
                   masks,
                   center,
                   center2,
                   temp,
                   temp2,
                   ncrops,
                   student_temp=0.1,
                   ngcrops=2):
    """iBOT's ``iBOTLoss.forward`` (main_ibot.py), loop for loop."""
    student_cls = (s_cls / student_temp).chunk(ncrops)
    student_patch = (s_patch / student_temp).chunk(ngcrops)
    teacher_cls = F.softmax((t_cls - center) / temp, dim=-1).chunk(ngcrops)
    teacher_patch = F.softmax(
        (t_patch - center2) / temp2, dim=-1).chunk(ngcrops)
    total1 = n1 = total2 = n2 = 0
    for q in range(len(teacher_cls)):
        for v in range(len(student_cls)):
            if v == q:
                loss2 = torch.sum(
                    -teacher_patch[q] *
                    F.log_softmax(student_patch[v], dim=-1),
                    dim=-1)
                mask = masks[v].flatten(-2, -1)
                loss2 = torch.sum(loss2 * mask.float(), dim=-1) / \
                    mask.sum(dim=-1).clamp(min=1.0)
                total2 += loss2.mean()
                n2 += 1
            else:
                loss1 = torch.sum(
                    -teacher_cls[q] * F.log_softmax(student_cls[v], dim=-1),
                    dim=-1)
                total1 += loss1.mean()
                n1 += 1
    center = center * 0.9 + t_cls.mean(0, keepdim=True) * 0.1
    center2 = center2 * 0.9 + t_patch.mean(1).mean(0, keepdim=True) * 0.1
    return total1 / n1, total2 / n2, center, center2


@pytest.mark.parametrize('epoch,temps',
                         [(0, (0.04, 0.04)), (1, (0.055, 0.055)),
                          (7, (0.07, 0.07))])
def test_ibot_head_is_ibot_loss_per_patch(epoch, temps):
    """Both losses, the per-patch losses and the center updates equal
    iBOT's own code; an image without masked patches counts 0."""
    torch.manual_seed(0)
    B, N, K, V = 3, 16, 64, 5
    head = MODELS.build(
        dict(type='HPMiBOTHead', out_channels=K, warmup_teacher_temp_epochs=3))
    head.set_epoch(epoch + 0.7)  # per epoch, as iBOT
    assert head.teacher_temps() == pytest.approx(temps)
    head.center.normal_()
    head.patch_center.normal_()
    center, center2 = head.center.clone(), head.patch_center.clone()
    s_cls, s_patch = torch.randn(V * B, K), torch.randn(2 * B, N, K)
    t_cls, t_patch = torch.randn(2 * B, K), torch.randn(2 * B, N, K)
    mask = random_mask(2 * B, N, 6)
    mask[1] = 0  # unmasked, as half of iBOT's images
    m = mask.bool()
    teacher_out = torch.cat([t_cls.unsqueeze(1), t_patch], 1)
    losses = head.loss(
        s_cls.unflatten(0, (V, B)), s_patch[m],
        teacher_out.unflatten(0, (2, B)), torch.randn(2 * B, N), mask)
    cls, patch, c1, c2 = ibot_reference(
        s_cls,
        s_patch,
        t_cls,
        t_patch,
        mask.view(2, B, 4, 4),
        center,
        center2.unsqueeze(0),
        *temps,
        ncrops=V)
    torch.testing.assert_close(losses['loss_cls'], cls)
    torch.testing.assert_close(losses['loss_rec'], patch)
    torch.testing.assert_close(head.center, c1)
    torch.testing.assert_close(head.patch_center, c2.squeeze(0))
    assert set(losses) == {'loss_cls', 'loss_rec', 'loss_pred', 'rank_acc'}
    # the per-patch losses the predictor learns: iBOT's before its mean
    head.center.copy_(center)
    head.patch_center.copy_(center2)
    per_patch = head.patch_losses(s_patch[m], t_patch.unflatten(0, (2, B)),
                                  mask)
    want = -(F.softmax((t_patch - center2) / temps[1], -1) *
             F.log_softmax(s_patch / 0.1, -1)).sum(-1) * mask
    torch.testing.assert_close(per_patch, want)
    assert per_patch[1].abs().sum() == 0


def test_ibot_head_is_fp32_from_a_bf16_teacher():
    """Under autocast the teacher's logits arrive in bf16: the losses and
    centers are those of their fp32 values, in fp32."""
    torch.manual_seed(0)
    heads = [
        MODELS.build(dict(type='HPMiBOTHead', out_channels=64))
        for _ in range(2)
    ]
    s_cls, s_patch = torch.randn(3, 2, 64), torch.randn(5, 64)
    teacher = torch.randn(2, 2, 17, 64).bfloat16()
    mask = random_mask(4, 16, 0)
    mask[0, :5] = 1
    with torch.autocast('cpu', dtype=torch.bfloat16):
        low = heads[0].loss(s_cls, s_patch, teacher, None, mask)
    high = heads[1].loss(s_cls, s_patch, teacher.float(), None, mask)
    for k in ('loss_cls', 'loss_rec'):
        assert low[k].dtype == torch.float32
        torch.testing.assert_close(low[k], high[k])
    torch.testing.assert_close(heads[0].patch_center, heads[1].patch_center)


def test_ibot_teacher_projects_and_scores_the_whole_global_crops():
    torch.manual_seed(0)
    model = build(ibot_cfg())
    model.train()
    model.set_progress(0.5, 1.5, max_epochs=10)
    inputs = views()
    seen = {}
    head_loss = model.head.loss
    model.head.loss = lambda *a: seen.setdefault('a', a) and head_loss(*a)
    losses = model.loss(inputs, [])
    assert set(losses) == {
        'loss_cls', 'loss_rec', 'loss_pred', 'rank_acc', 'alpha'
    }
    t = model.teacher.module
    assert set(t) == {'backbone', 'neck', 'scorer'}
    assert not t.training  # no drop path in the teacher
    g = torch.cat(inputs[:2])
    tokens = t['backbone'](g, torch.zeros(4, 16))[0]
    torch.testing.assert_close(seen['a'][2],
                               t['neck'](tokens).unflatten(0, (2, 2)))
    torch.testing.assert_close(model.teacher(g).scores, t['scorer'](tokens))
    s_cls, s_patch, _, scores, mask = seen['a']
    assert s_cls.shape == (5, 2, 64) and scores.shape == (4, 16)
    assert s_patch.shape == (int(mask.sum()), 64)
    # gradients reach the student and its predictor, never the teacher
    sum(v for k, v in losses.items() if k.startswith('loss')).backward()
    assert model.predictor.embed.weight.grad.abs().sum() > 0
    assert model.backbone.mask_token.grad.abs().sum() > 0
    assert model.neck.last_layer.weight.grad.abs().sum() > 0  # epoch 1.5
    assert all(p.grad is None for p in model.teacher.parameters())


def test_ibot_local_crops_only_meet_the_cls_loss():
    torch.manual_seed(0)
    model = build(
        ibot_cfg(
            predictor=None,
            head=dict(type='HPMiBOTHead', out_channels=64, loss_pred=None),
            mask_generator=dict(
                type='BlockwiseMaskGenerator',
                mask_ratio=[(0.2, 0.5)],
                min_num_patches=2)))
    model.eval()  # no drop path: equal inputs give equal outputs
    model.set_progress(0., 2., max_epochs=10)
    a, b = views(seed=0), views(seed=0)
    b[3] = b[3] + 1.
    outs = []
    for inputs in (a, b):
        torch.manual_seed(1)
        model.head.center.zero_()
        model.head.patch_center.zero_()
        outs.append(model.loss(inputs, []))
    torch.testing.assert_close(outs[0]['loss_rec'], outs[1]['loss_rec'])
    assert outs[0]['loss_cls'] != outs[1]['loss_cls']
    assert model.teacher is not None  # iBOT's own teacher, random masks
    assert set(outs[0]) == {'loss_cls', 'loss_rec'}
    with pytest.raises(ValueError, match='MultiView'):
        model.loss(torch.randn(2, 3, 32, 32), [])
    with pytest.raises(ValueError, match='2 global crops of 32x32'):
        model.loss(views()[2:], [])


def test_ibot_last_layer_is_frozen_in_the_first_epoch():
    """Zero gradients while frozen: after an AdamW step with weight decay
    the (normalised) prototypes are unchanged; a later epoch moves them."""
    from torch.nn.functional import normalize
    torch.manual_seed(0)
    model = build(ibot_cfg())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                            lr=1e-2,
                            weight_decay=0.04)
    for epoch, moves in ((0.5, False), (1., True)):
        model.set_progress(0.5, epoch, max_epochs=10)
        before = normalize(model.neck.last_layer.weight, dim=1).clone()
        opt.zero_grad()
        losses = model.loss(views(), [])
        sum(v for k, v in losses.items() if k.startswith('loss')).backward()
        opt.step()
        after = normalize(model.neck.last_layer.weight, dim=1)
        assert torch.allclose(before, after, atol=1e-6) != moves, epoch
    with pytest.raises(ValueError, match='drops the masked.*Fix: a float'):
        build(
            hpm_cfg(
                mask_generator=dict(
                    type='RandomMaskGenerator', mask_ratio=IBOT_MASK)))


def test_ibot_neck_matches_ibot_head():
    """MLP, l2 norm, weight-normalised last layer (iBOT's iBOTHead with a
    shared head): the same map as torch's weight_norm with g = 1."""
    torch.manual_seed(0)
    neck = build(
        dict(
            type='iBOTNeck',
            in_channels=32,
            hidden_channels=48,
            bottleneck_channels=16,
            out_channels=64,
            norm_last_layer=False))
    assert neck.last_layer_scale.shape == (64, 1)
    x = torch.randn(2, 5, 32)
    last = torch.nn.utils.parametrizations.weight_norm(
        torch.nn.Linear(16, 64, bias=False))
    with torch.no_grad():
        last.parametrizations.weight.original1.copy_(neck.last_layer.weight)
        last.parametrizations.weight.original0.fill_(1)
    want = last(F.normalize(neck.mlp(x), dim=-1))
    torch.testing.assert_close(neck(x), want)
    assert [type(m).__name__ for m in neck.mlp
            ] == ['Linear', 'GELU', 'Linear', 'GELU', 'Linear']


@pytest.mark.parametrize('cfg', [beit_cfg, ibot_cfg])
def test_framework_checkpoints_convert_to_a_plain_vit(cfg):
    from mmpretrain.models import VisionTransformer

    from hpm_mm.apis.convert import convert, encoder_state
    model = build(cfg())
    enc = encoder_state({'state_dict': model.state_dict()})
    assert 'mask_token' not in enc
    vit = VisionTransformer(arch=ARCH, img_size=32, patch_size=8)
    out = {
        k[len('backbone.'):]: v
        for k, v in convert(enc, 'mmpretrain').items()
    }
    vit.load_state_dict(out, strict=True)


@pytest.mark.parametrize('cfg', [hpm_cfg, simmim_cfg, ibot_cfg])
def test_a_checkpoint_keyed_before_the_scorer_rename_loads(cfg):
    """The teacher's copy of the score module is ``teacher.module.scorer``
    (``teacher.module.predictor`` before #72: for HPM the decoder, so one
    name for two things): a state dict in the old keys loads strictly into
    the new ones, through every loader (``_load_from_state_dict``), and
    today's keys pass unchanged; iBOT's ``teacher.module.neck`` stays."""
    torch.manual_seed(0)
    model, fresh = build(cfg()), build(cfg())
    state = model.state_dict()
    assert any(k.startswith('teacher.module.scorer.') for k in state)
    assert not any('teacher.module.predictor.' in k for k in state)
    old = {
        k.replace('teacher.module.scorer.', 'teacher.module.predictor.'): v
        for k, v in state.items()
    }
    assert fresh.upgrade_state_dict(old).keys() == state.keys()
    assert fresh.upgrade_state_dict(state).keys() == state.keys()
    fresh.load_state_dict(old, strict=True)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, state[k]), k
