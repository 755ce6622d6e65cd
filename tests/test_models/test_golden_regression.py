"""The golden regression: numbers pinned before each refactor, recorded by
running the same code on the code before it. The refactored modules must give
the same initial weights and losses for the same seeds, inputs and optimizer
steps. HPM and the Fashion-MNIST configs were pinned before the parts
refactor (commit 7641b6d, the HPM class holding its teacher); the frameworks
and the other score / target sources before the HPM family's shared base
(issue #31). Pinned on the project's torch (2.14.1): torch 2.11's
``trunc_normal_`` draws other values for SimMIM's, BEiT's and iBOT's mask
token, so those three differ there (HPM's and the configs' do not)."""
import pytest
import torch
from helpers import FMNIST_CFG, REPO, tiny_hpm
from mmengine.config import Config
from mmengine.optim import OptimWrapper
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
    (2.3766729831695557, 0.7273013591766357, 0.4285239279270172,
     0.1666666716337204, 8.0),
    (0.8653035163879395, 0.7138242721557617, 0.43384307622909546,
     0.3333333432674408, 16.0),
]
FMNIST_HPM_PARAM_SUM = 15919.78425502051
FMNIST_MAE = [1.8874540328979492, 2.017815351486206, 0.7193713784217834]
FMNIST_MAE_PARAM_SUM = 12300.896534358622


def tiny(input_scale=1.0):
    return tiny_hpm(
        seed=0,
        teacher=dict(
            momentum=0.1,
            end_momentum=0.05,
            momentum_epochs=4,
            input_scale=input_scale))


def from_config(path):
    """The config's model as it was pinned: at 32 px (8 x 8 patches) and
    with its teacher ramp over 10 epochs; the configs moved to
    Fashion-MNIST's native 28 px and a ramp over the whole run later
    (issues #32, #29)."""
    cfg = Config.fromfile(path)
    cfg.model.backbone.img_size = 32
    cfg.model.neck.num_patches = 64
    if cfg.model.get('teacher'):
        cfg.model.teacher.momentum_epochs = 10
    model_cfg = cfg.model.to_dict()
    model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor.to_dict())
    torch.manual_seed(0)
    model = MODELS.build(model_cfg)
    model.init_weights()
    param_sum = float(
        sum(v.double().sum() for v in model.state_dict().values()
            if v.dtype.is_floating_point))
    return model, param_sum


def run(model, steps=4, batch=4, channels=1, size=16):
    """``steps`` train steps (AdamW, clip 5) on fixed random batches, the
    schedule at i / steps and epoch i; the log of each step."""
    g = torch.Generator().manual_seed(1)
    xs = [
        torch.randn(batch, channels, size, size, generator=g) * 50 + 100
        for _ in range(steps)
    ]
    optim = OptimWrapper(
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                          lr=1e-3),
        clip_grad=dict(max_norm=5.0))
    logs = []
    torch.manual_seed(2)
    for i, x in enumerate(xs):
        if hasattr(model, 'set_progress'):
            # iBOT's teacher ramps over the run: 100 epochs, as pinned
            model.set_progress(i / steps, epoch=i, max_epochs=100)
        logs.append(model.train_step(dict(inputs=x, data_samples=None), optim))
    return logs


def _check(logs, want):
    got = [float(log[k]) for log in logs for k in KEYS]
    assert got == pytest.approx([v for row in want for v in row],
                                rel=1e-5,
                                abs=1e-6)


def test_tiny_hpm_unchanged():
    _check(run(tiny()), TINY)


def test_half_resolution_teacher_unchanged():
    _check(run(tiny(input_scale=0.5)), TINY_HALFRES)


def test_fashion_mnist_configs_unchanged():
    """The main job's model and its MAE twin: same initial weights and the
    same first three steps as before the configs shared their bases."""
    hpm, param_sum = from_config(FMNIST_CFG)
    assert param_sum == pytest.approx(FMNIST_HPM_PARAM_SUM, rel=1e-9)
    _check(run(hpm, steps=3, batch=8, size=32), FMNIST_HPM)
    mae, param_sum = from_config(MAE_CFG)
    assert param_sum == pytest.approx(FMNIST_MAE_PARAM_SUM, rel=1e-9)
    losses = [
        float(log['loss']) for log in run(mae, steps=3, batch=8, size=32)
    ]
    assert losses == pytest.approx(FMNIST_MAE, rel=1e-5)


# The hard-mining frameworks and the other score / target sources, pinned
# before the family shared a base class and one loss predictor (issue #31):
# name -> (sum of the initial weights, the log of each of 3 steps)
FRAMEWORKS = {
    'simmim': (673.5542007698293, [
        {
            'loss': 1.6836401,
            'loss_rec': 0.9425318,
            'loss_pred': 0.7411084,
            'rank_acc': 0.4555556,
            'alpha': 0.5,
            'num_hard': 5.0
        },
        {
            'loss': 1.6061931,
            'loss_rec': 0.9395019,
            'loss_pred': 0.6666912,
            'rank_acc': 0.6333333,
            'alpha': 0.5,
            'num_hard': 5.0
        },
        {
            'loss': 1.5616813,
            'loss_rec': 0.9066733,
            'loss_pred': 0.655008,
            'rank_acc': 0.6333333,
            'alpha': 0.5,
            'num_hard': 5.0
        },
    ]),
    'beit': (671.0275147458728, [
        {
            'loss': 4.7907438,
            'loss_rec': 4.0622263,
            'loss_pred': 0.7285173,
            'rank_acc': 0.2738095,
            'alpha': 0.5,
            'num_hard': 3.0
        },
        {
            'loss': 4.5888376,
            'loss_rec': 3.9272225,
            'loss_pred': 0.6616153,
            'rank_acc': 0.7142857,
            'alpha': 0.5,
            'num_hard': 3.0
        },
        {
            'loss': 4.4592881,
            'loss_rec': 3.8159986,
            'loss_pred': 0.6432897,
            'rank_acc': 0.6785714,
            'alpha': 0.5,
            'num_hard': 3.0
        },
    ]),
    'ibot': (698.8954082646169, [
        {
            'loss': 8.2616186,
            'loss_cls': 2.8873675,
            'loss_rec': 4.6082292,
            'loss_pred': 0.7660217,
            'rank_acc': 0.3333333,
            'alpha': 0.5
        },
        {
            'loss': 13.5001707,
            'loss_cls': 5.3959336,
            'loss_rec': 7.4229064,
            'loss_pred': 0.6813306,
            'rank_acc': 0.5217391,
            'alpha': 0.5
        },
        {
            'loss': 11.6980085,
            'loss_cls': 5.3273873,
            'loss_rec': 5.6557508,
            'loss_pred': 0.7148708,
            'rank_acc': 0.4375,
            'alpha': 0.5
        },
    ]),
    'ema_feat': (920.5555566210995, [
        {
            'loss': 0.7553731,
            'loss_rec': 0.0615512,
            'loss_pred': 0.693822,
            'rank_acc': 0.4810606,
            'alpha': 0.5,
            'num_hard': 6.0
        },
        {
            'loss': 0.75667,
            'loss_rec': 0.061862,
            'loss_pred': 0.6948079,
            'rank_acc': 0.4356061,
            'alpha': 0.5,
            'num_hard': 6.0
        },
        {
            'loss': 0.7554132,
            'loss_rec': 0.06398,
            'loss_pred': 0.6914333,
            'rank_acc': 0.5681818,
            'alpha': 0.5,
            'num_hard': 6.0
        },
    ]),
    'cls_attention': (914.0532039864977, [
        {
            'loss': 1.9916294,
            'loss_rec': 1.2986197,
            'loss_pred': 0.6930097,
            'rank_acc': 0.5113636,
            'alpha': 0.5,
            'num_hard': 6.0
        },
        {
            'loss': 1.9986944,
            'loss_rec': 1.3073713,
            'loss_pred': 0.6913231,
            'rank_acc': 0.5643939,
            'alpha': 0.5,
            'num_hard': 6.0
        },
        {
            'loss': 1.9551803,
            'loss_rec': 1.2594955,
            'loss_pred': 0.6956848,
            'rank_acc': 0.4242424,
            'alpha': 0.5,
            'num_hard': 6.0
        },
    ]),
}


def _framework_model(name):
    import test_frameworks as F
    cfg = dict(
        simmim=F.simmim_cfg,
        beit=F.beit_cfg,
        ibot=F.ibot_cfg,
        ema_feat=lambda: F.feature_cfg(dict(type='EMATeacherTarget'), 32),
        cls_attention=lambda: F.hpm_cfg(
            mask_generator=dict(
                type='AttentionMaskGenerator', alpha_0=0.5, alpha_T=0.5))
    )[name]()
    cfg['data_preprocessor'] = dict(
        type='SelfSupDataPreprocessor', mean=[0., 0., 0.], std=[1., 1., 1.])
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


def _framework_inputs(name, i):
    import test_frameworks as F

    def img(seed):
        return torch.randn(
            4, 3, 32, 32, generator=torch.Generator().manual_seed(seed))

    if name == 'beit':
        return [img(10 + i), img(110 + i)]
    if name == 'ibot':
        return F.views(B=2, num_local=2, seed=i)
    return img(10 + i)


@pytest.mark.parametrize('name', list(FRAMEWORKS))
def test_frameworks_and_sources_unchanged(name):
    """HPM on SimMIM / BEiT / iBOT, the EMA feature target and CLS-attention
    scores: same initial weights, same 3 steps."""
    model = _framework_model(name)
    want_sum, want_logs = FRAMEWORKS[name]
    param_sum = float(
        sum(v.double().sum() for v in model.state_dict().values()
            if v.dtype.is_floating_point))
    assert param_sum == pytest.approx(want_sum, rel=1e-9)
    optim = OptimWrapper(
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                          lr=1e-3),
        clip_grad=dict(max_norm=5.0))
    torch.manual_seed(2)
    for i, want in enumerate(want_logs):
        # iBOT's teacher ramps over the run: 100 epochs, as pinned
        model.set_progress(i / len(want_logs), epoch=i, max_epochs=100)
        log = model.train_step(
            dict(inputs=_framework_inputs(name, i), data_samples=None), optim)
        assert {
            k: float(v)
            for k, v in log.items()
        } == pytest.approx(
            want, rel=1e-5, abs=1e-6)


# One step in detail, pinned before the loss path was cut down (issue
# #103): per variant and step, every logged value, the scores the mask read
# and the mask (exact), every gradient before clipping; the teacher's and
# the student's weights after 3 steps (digests: the sum and a fixed
# pseudo-random weighting, which a moved element changes).
TEACH = dict(momentum=0.1, end_momentum=0.05, momentum_epochs=4)

# name -> (the tiny model's config builder, its overrides)
STEP_VARIANTS = {
    'hpm': ('hpm', {}),
    'hpm_fast': ('hpm', dict(teacher=dict(input_scale=0.5))),
    'hpm_easy2hard': ('hpm', dict(mask_generator=dict(alpha_0=0., alpha_T=1.))),
    'hpm_argmin': ('hpm', dict(mask_generator=dict(mode='argmin'))),
    'hpm_absolute': ('hpm', dict(head=dict(loss_pred=dict(type='HPMAbsoluteLoss')))),
    'hpm_guarded': ('hpm', {}),  # the applied flags on the device, one 0
    'mae_plain': ('hpm', dict(mask_generator=dict(alpha_0=0., alpha_T=0.), neck=dict(predictor_depth=0), head=dict(loss_pred=None))),
    'hpm_ema_feat': ('feat', {}),
    'mae_ema_feat': ('feat', dict(mask_generator=dict(alpha_0=0., alpha_T=0.))),
    'simmim': ('simmim', {}),
    'beit': ('beit', {}),
    'ibot': ('ibot', {}),
}  # yapf: disable


def _variant_cfg(name: str) -> dict:
    import test_frameworks as F
    from helpers import merge, tiny_hpm_cfg
    kind, overrides = STEP_VARIANTS[name]
    if kind == 'hpm':
        return merge(tiny_hpm_cfg(teacher=dict(TEACH)), overrides)
    if kind == 'feat':  # the EMA teacher's features, 32 px RGB
        return F.feature_cfg(
            dict(type='EMATeacherTarget'),
            32,
            teacher=dict(TEACH),
            **overrides)
    return getattr(F, kind + '_cfg')(**overrides)


def _digest(t: torch.Tensor) -> tuple:
    t = t.detach().double().flatten()
    w = torch.sin(torch.arange(t.numel(), dtype=torch.float64))
    return float(t.sum()), float((t * w).sum())


def _step_inputs(name, i):
    import test_frameworks as F
    g = torch.Generator().manual_seed(100 + i)
    if name in ('simmim', 'beit') or 'feat' in name:
        imgs = [torch.randn(4, 3, 32, 32, generator=g) for _ in range(2)]
        return imgs if name == 'beit' else imgs[0]
    if name == 'ibot':
        return F.views(B=2, num_local=2, seed=i)
    return torch.randn(4, 1, 16, 16, generator=g)


def step_record(name: str, steps: int = 3) -> dict:
    """``steps`` AdamW steps (clip 5) of the variant: {step: (log, scores
    digest, mask rows as bit strings, gradient digest)} and the digests of
    the student's and the teacher's weights after."""
    cfg = _variant_cfg(name)
    cfg.setdefault(
        'data_preprocessor',
        dict(type='SelfSupDataPreprocessor', mean=[0.] * 3, std=[1.] * 3))
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    model.init_weights()
    seen = []
    choose = model.choose_mask

    def spy(scores, inputs):
        mask = choose(scores, inputs)
        seen.append(
            (None if scores is None else _digest(scores),
             [''.join(str(int(v)) for v in row) for row in mask.tolist()]))
        return mask

    model.choose_mask = spy
    optim = OptimWrapper(
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                          lr=1e-3),
        clip_grad=dict(max_norm=5.0))
    out = {}
    torch.manual_seed(2)
    for i in range(steps):
        applied = torch.tensor(float(i != 2)) if name == 'hpm_guarded' \
            else None
        model.set_progress(
            i / steps, epoch=i, optim_steps=i, max_epochs=100, applied=applied)
        data = model.data_preprocessor(
            dict(inputs=_step_inputs(name, i), data_samples=None), True)
        loss, log = model.parse_losses(model._run_forward(data, mode='loss'))
        optim.backward(loss)
        grads = torch.cat([
            p.grad.flatten() for p in model.parameters() if p.grad is not None
        ])
        optim.step()
        optim.zero_grad()
        out[i] = ({
            k: float(v.detach())
            for k, v in log.items()
        }, *seen[i], _digest(grads))
    student = model.student().state_dict()
    out['student'] = _digest(
        torch.cat([v.flatten() for v in student.values()]))
    if model.teacher is not None:
        out['teacher'] = _digest(
            torch.cat([
                v.flatten() for v in model.teacher.state_dict().values()
                if v.dtype.is_floating_point
            ]))
    return out


# generated by running step_record on the code before the cut (f0012c6)
# yapf: disable
STEP_PINS = {'hpm': {0: ({'loss': 2.09578537940979, 'loss_rec': 1.3944841623306274, 'loss_pred': 0.7013012170791626, 'rank_acc': 0.3787878751754761, 'alpha': 0.5, 'num_hard': 6.0},
             (7.6482635866850615, -0.23444295748998967),
             ['1011111010110111', '1011011111101110', '1110100110111111', '0111110101011111'],
             (0.5931813230295298, -0.4601731968046343)),
         1: ({'loss': 2.019615650177002, 'loss_rec': 1.3287602663040161, 'loss_pred': 0.6908553242683411, 'rank_acc': 0.5568181872367859, 'alpha': 0.5, 'num_hard': 6.0},
             (7.9194993283599615, 0.8384908146782716),
             ['1110110101111011', '1101111100101111', '0011001111111111', '0110011111111011'],
             (0.3684775705475438, -0.10483600345031752)),
         2: ({'loss': 1.8811893463134766, 'loss_rec': 1.1894606351852417, 'loss_pred': 0.6917287707328796, 'rank_acc': 0.5454545617103577, 'alpha': 0.5, 'num_hard': 6.0},
             (7.126146980561316, -0.28979895719983273),
             ['0011111110110111', '1101101001111111', '0110111110111101', '0111011100111111'],
             (0.3724604624370857, -0.5404872994576793)),
         'student': (650.9704166167367, -20.093916219477176),
         'teacher': (651.2558888896873, -19.921563907070684)},
 'hpm_fast': {0: ({'loss': 2.096010208129883, 'loss_rec': 1.3941584825515747, 'loss_pred': 0.7018517255783081, 'rank_acc': 0.3712121248245239, 'alpha': 0.5, 'num_hard': 6.0},
                  (8.384477823972702, 0.1401727576517296),
                  ['1011110110110111', '1001011101111111', '1110101100111111', '1011110001111111'],
                  (0.5764143553231733, -0.293018815634431)),
              1: ({'loss': 2.03153920173645, 'loss_rec': 1.3398128747940063, 'loss_pred': 0.6917262673377991, 'rank_acc': 0.5378788113594055, 'alpha': 0.5, 'num_hard': 6.0},
                  (9.021438103169203, -0.0005221108504739891),
                  ['1110010101111111', '1101101100111111', '0001111111110111', '0100011111111111'],
                  (0.3869191133399603, -0.13305576504086591)),
              2: ({'loss': 1.8651723861694336, 'loss_rec': 1.172979474067688, 'loss_pred': 0.6921928524971008, 'rank_acc': 0.5265151262283325, 'alpha': 0.5, 'num_hard': 6.0},
                  (8.267939460463822, 0.0687985722717404),
                  ['0011101110111111', '1101101101110111', '0110110110111111', '0111011100111111'],
                  (0.3509586822184384, -0.3219332938668794)),
              'student': (650.8991708686608, -20.185443847637195),
              'teacher': (651.2498046755184, -19.93756170637392)},
 'hpm_easy2hard': {0: ({'loss': 2.1266727447509766, 'loss_rec': 1.4250246286392212, 'loss_pred': 0.7016481161117554, 'rank_acc': 0.3712121248245239, 'alpha': 0.0, 'num_hard': 0.0},
                       None,
                       ['1011111010110111', '1011011111111100', '1110101010111111', '1111110001111011'],
                       (0.5941468296442274, -0.44969281208446854)),
                   1: ({'loss': 2.0344150066375732, 'loss_rec': 1.3420823812484741, 'loss_pred': 0.6923325657844543, 'rank_acc': 0.5340909361839294, 'alpha': 0.3333333432674408, 'num_hard': 4.0},
                       (7.927954774349928, 0.8386326393532524),
                       ['1110110101111011', '1101111100101111', '0001110111111111', '0110111111111001'],
                       (0.40671265591410366, -0.3247841856287169)),
                   2: ({'loss': 1.867663860321045, 'loss_rec': 1.1762486696243286, 'loss_pred': 0.6914151310920715, 'rank_acc': 0.560606062412262, 'alpha': 0.6666666865348816, 'num_hard': 8.0},
                       (7.154010196216404, -0.2876676394751554),
                       ['0011111110110111', '0101101101111111', '0110111110111101', '0111011100111111'],
                       (0.34855949378145623, -0.4615399337485395)),
                   'student': (650.6781114927253, -20.149174070591304),
                   'teacher': (651.2285808558731, -19.926409919279305)},
 'hpm_argmin': {0: ({'loss': 2.0848121643066406, 'loss_rec': 1.3854244947433472, 'loss_pred': 0.6993877291679382, 'rank_acc': 0.3787878751754761, 'alpha': 0.5, 'num_hard': 6.0},
                    (7.6482635866850615, -0.23444295748998967),
                    ['1111110010110111', '1011111111110100', '1110111001111110', '1011110011111011'],
                    (0.5586539985570027, -0.2125609191226867)),
                1: ({'loss': 2.0842442512512207, 'loss_rec': 1.3912749290466309, 'loss_pred': 0.6929694414138794, 'rank_acc': 0.5113636255264282, 'alpha': 0.5, 'num_hard': 6.0},
                    (7.93054573237896, 0.8380859332239712),
                    ['1011110111011110', '1111110110101011', '1101110111110110', '1101011111011101'],
                    (0.4208906167922821, -0.370721235396843)),
                2: ({'loss': 1.8901915550231934, 'loss_rec': 1.195196509361267, 'loss_pred': 0.694995105266571, 'rank_acc': 0.4734848439693451, 'alpha': 0.5, 'num_hard': 6.0},
                    (7.168780052103102, -0.289291862225817),
                    ['1101001111110111', '1111111011000111', '1111110101011011', '0111101111011110'],
                    (0.41154339476786994, -0.43101812174866505)),
                'student': (650.7593552979356, -20.115816345476283),
                'teacher': (651.2400362208689, -19.941850493299953)},
 'hpm_absolute': {0: ({'loss': 2.345579147338867, 'loss_rec': 1.3944841623306274, 'loss_pred': 0.9510948657989502, 'rank_acc': 0.3787878751754761, 'alpha': 0.5, 'num_hard': 6.0},
                      (7.6482635866850615, -0.23444295748998967),
                      ['1011111010110111', '1011011111101110', '1110100110111111', '0111110101011111'],
                      (0.7508805459342511, -0.5891704194862073)),
                  1: ({'loss': 2.2456374168395996, 'loss_rec': 1.328781008720398, 'loss_pred': 0.9168565273284912, 'rank_acc': 0.5454545617103577, 'alpha': 0.5, 'num_hard': 6.0},
                      (7.755241620354354, 0.8384486524881891),
                      ['1110110101111011', '1101111100101111', '0011001111111111', '0110011111111011'],
                      (0.5068885089429269, -0.15026804342850508)),
                  2: ({'loss': 2.1079280376434326, 'loss_rec': 1.1897659301757812, 'loss_pred': 0.9181621670722961, 'rank_acc': 0.5303030014038086, 'alpha': 0.5, 'num_hard': 6.0},
                      (6.731487864628434, -0.29129417401345525),
                      ['0011111110110111', '1101101001111111', '0110111110111101', '0111011100111111'],
                      (0.44429945932158876, -0.5862916012975106)),
                  'student': (651.1957004322321, -20.37374535516439),
                  'teacher': (651.276602563672, -19.943680310207117)},
 'hpm_guarded': {0: ({'loss': 2.09578537940979, 'loss_rec': 1.3944841623306274, 'loss_pred': 0.7013012170791626, 'rank_acc': 0.3787878751754761, 'alpha': 0.5, 'num_hard': 6.0},
                     (7.6482635866850615, -0.23444295748998967),
                     ['1011111010110111', '1011011111101110', '1110100110111111', '0111110101011111'],
                     (0.5931813230295298, -0.4601731968046343)),
                 1: ({'loss': 2.019615650177002, 'loss_rec': 1.3287602663040161, 'loss_pred': 0.6908553242683411, 'rank_acc': 0.5568181872367859, 'alpha': 0.5, 'num_hard': 6.0},
                     (7.919499384239316, 0.8384908421969065),
                     ['1110110101111011', '1101111100101111', '0011001111111111', '0110011111111011'],
                     (0.3684775705475438, -0.10483600345031752)),
                 2: ({'loss': 1.8811893463134766, 'loss_rec': 1.1894606351852417, 'loss_pred': 0.6917287707328796, 'rank_acc': 0.5454545617103577, 'alpha': 0.5, 'num_hard': 6.0},
                     (7.086405207403004, -0.2878736236816074),
                     ['0011111110110111', '1101101001111111', '0110111110111101', '0111011100111111'],
                     (0.3724604624370857, -0.5404872994576793)),
                 'student': (650.9704166167367, -20.093916219477176),
                 'teacher': (651.266799989735, -19.916383996137544)},
 'mae_plain': {0: ({'loss': 1.441651701927185, 'loss_rec': 1.441651701927185, 'alpha': 0.0, 'num_hard': 0.0},
                   None,
                   ['1011111010110111', '1011011111111100', '1110101010111111', '1111110001111011'],
                   (0.7174422899478676, -0.06148715352141898)),
               1: ({'loss': 1.3557181358337402, 'loss_rec': 1.3557181358337402, 'alpha': 0.0, 'num_hard': 0.0},
                   None,
                   ['1110110101111011', '1101111100101111', '0111110111110110', '0101111111011011'],
                   (0.40961114318170866, -0.2745811896321384)),
               2: ({'loss': 1.132674217224121, 'loss_rec': 1.132674217224121, 'alpha': 0.0, 'num_hard': 0.0},
                   None,
                   ['0011101111110111', '1101111101100111', '0110111110111101', '0111011101111110'],
                   (0.339338618184842, 0.031700327715426746)),
               'student': (430.41210028735804, -21.595204178506325)},
 'hpm_ema_feat': {0: ({'loss': 0.7557976245880127, 'loss_rec': 0.06343766301870346, 'loss_pred': 0.692359983921051, 'rank_acc': 0.5037878751754761, 'alpha': 0.5, 'num_hard': 6.0},
                      (-2.292621572385542, -0.06014671339381511),
                      ['1111111110100101', '1111011111110100', '1111110000111111', '0111111001111011'],
                      (-0.0018201221525231265, -0.014922481719788987)),
                  1: ({'loss': 0.7532467842102051, 'loss_rec': 0.06143491342663765, 'loss_pred': 0.6918118596076965, 'rank_acc': 0.5795454382896423, 'alpha': 0.5, 'num_hard': 6.0},
                      (-2.0572405594284646, -0.025572944689963684),
                      ['1111010111111010', '1011111100101111', '1011011111110110', '0111011111111001'],
                      (0.0039290698574990235, -0.03782610768674885)),
                  2: ({'loss': 0.7499421238899231, 'loss_rec': 0.06239931657910347, 'loss_pred': 0.6875427961349487, 'rank_acc': 0.6212121248245239, 'alpha': 0.5, 'num_hard': 6.0},
                      (-2.1362125797459157, 0.07464293867902505),
                      ['1101101111110011', '1111101101010111', '1111110110011101', '0111111100111110'],
                      (-0.007096786167955733, -0.03832293953144539)),
                  'student': (630.1422564630916, -2.146216565776634),
                  'teacher': (631.8818027003624, -2.9814773229460294)},
 'mae_ema_feat': {0: ({'loss': 0.7528735995292664, 'loss_rec': 0.06353417783975601, 'loss_pred': 0.6893393993377686, 'rank_acc': 0.5909090638160706, 'alpha': 0.0, 'num_hard': 0.0},
                      None,
                      ['1011111010110111', '1011011111111100', '1110101010111111', '1111110001111011'],
                      (-0.005901063141685869, -0.03379452695082874)),
                  1: ({'loss': 0.7519944310188293, 'loss_rec': 0.06359042972326279, 'loss_pred': 0.6884040236473083, 'rank_acc': 0.6136363744735718, 'alpha': 0.0, 'num_hard': 0.0},
                      None,
                      ['1110110101111011', '1101111100101111', '0111110111110110', '0101111111011011'],
                      (0.0013337543791681616, -0.03534668210171499)),
                  2: ({'loss': 0.7479256987571716, 'loss_rec': 0.060595136135816574, 'loss_pred': 0.6873305439949036, 'rank_acc': 0.6022727489471436, 'alpha': 0.0, 'num_hard': 0.0},
                      None,
                      ['0011101111110111', '1101111101100111', '0110111110111101', '0111011101111110'],
                      (-0.0068057638552096456, -0.03889638979055399)),
                  'student': (629.388019779924, -2.308513114639826),
                  'teacher': (631.8136871352659, -2.9801534620034484)},
 'simmim': {0: ({'loss': 1.663017749786377, 'loss_rec': 0.9460356831550598, 'loss_pred': 0.7169820070266724, 'rank_acc': 0.46666666865348816, 'alpha': 0.5, 'num_hard': 5.0},
                (-36.54061081260443, 2.645869050225762),
                ['1010110011100111', '1011011111101000', '0100101111110110', '1001111101011001'],
                (0.4096522104250333, 0.21481974875660573)),
            1: ({'loss': 1.6478416919708252, 'loss_rec': 0.915179431438446, 'loss_pred': 0.7326622605323792, 'rank_acc': 0.4055555462837219, 'alpha': 0.5, 'num_hard': 5.0},
                (-35.40895822644234, -0.07249253472494854),
                ['1110111101011000', '1011100101101011', '1110010111110010', '1110010111011001'],
                (0.3373399276102784, 0.011955395501845087)),
            2: ({'loss': 1.5982763767242432, 'loss_rec': 0.9085701107978821, 'loss_pred': 0.6897062063217163, 'rank_acc': 0.5555555820465088, 'alpha': 0.5, 'num_hard': 5.0},
                (-35.33850122988224, 0.9315728898174237),
                ['1000111110101011', '0101111110000111', '0110110100011111', '1111101010001110'],
                (0.3326090227614127, 0.30510185716925886)),
            'student': (457.8565135934914, 17.4083273577763),
            'teacher': (458.1484117070668, 17.31406827449083)},
 'beit': {0: ({'loss': 4.786247730255127, 'loss_rec': 4.073716163635254, 'loss_pred': 0.7125314474105835, 'rank_acc': 0.4166666567325592, 'alpha': 0.5, 'num_hard': 3.0},
              (2.5255904719233513, -3.0343420627573328),
              ['0101000011110100', '0010000001110111', '1101110000010010', '0110011100000110'],
              (-0.2796024885172903, -1.4787989461655784)),
          1: ({'loss': 4.59128475189209, 'loss_rec': 3.9452834129333496, 'loss_pred': 0.6460011601448059, 'rank_acc': 0.773809552192688, 'alpha': 0.5, 'num_hard': 3.0},
              (5.383538268506527, -2.1776861173635114),
              ['0000111100110010', '1100100111000010', '0110011001100100', '0010000101110110'],
              (-0.5771805172558115, -2.2686374190844916)),
          2: ({'loss': 4.4699530601501465, 'loss_rec': 3.8262035846710205, 'loss_pred': 0.6437493562698364, 'rank_acc': 0.6547619104385376, 'alpha': 0.5, 'num_hard': 3.0},
              (5.252524070441723, 1.2003992857853307),
              ['1001100100011001', '1111000111000000', '1100110010000011', '1110001001100010'],
              (-0.7167163000032968, -1.6996932120213974)),
          'student': (463.43093949755746, -13.506373954344141),
          'teacher': (463.58891971389295, -13.35060878881251)},
 'ibot': {0: ({'loss': 8.261618614196777, 'loss_cls': 2.8873674869537354, 'loss_rec': 4.608229160308838, 'loss_pred': 0.766021728515625, 'rank_acc': 0.3333333432674408, 'alpha': 0.5},
              (-22.602271109819412, 0.24212945103148598),
              ['1100110000011010', '0000000111010111', '0000000001111110', '0000011001100000'],
              (-1051.8471247153398, -1798.3019498022222)),
          1: ({'loss': 13.500174522399902, 'loss_cls': 5.395936965942383, 'loss_rec': 7.422906875610352, 'loss_pred': 0.6813305616378784, 'rank_acc': 0.52173912525177, 'alpha': 0.5},
              (-12.890278913080692, -0.29977894734460986),
              ['1000110011000010', '1100110001000000', '0100000001111100', '0000011100001000'],
              (-1154.5418571331793, -1122.9457202695226)),
          2: ({'loss': 11.698006629943848, 'loss_cls': 5.327386379241943, 'loss_rec': 5.655749797821045, 'loss_pred': 0.7148707509040833, 'rank_acc': 0.4375, 'alpha': 0.5},
              (-11.858927354216576, 0.2653704157416241),
              ['0101110001000100', '1111000000000000', '1111100010000000', '1111111000100000'],
              (-837.9727020230184, -800.2396558602103)),
          'student': (462.1306891927302, 4.445190331158274),
          'teacher': (461.8406693792611, 4.5213691230540185)}}
# yapf: enable


def _approx(want):
    """Floats to 1e-5 (another CPU's kernels may round otherwise), the
    masks exact."""
    if isinstance(want, float):
        return pytest.approx(want, rel=1e-5, abs=1e-6)
    if isinstance(want, dict):
        return {k: _approx(v) for k, v in want.items()}
    if isinstance(want, (list, tuple)):
        return type(want)(_approx(v) for v in want)
    return want


@pytest.mark.parametrize('name', list(STEP_VARIANTS))
def test_each_step_in_detail_unchanged(name):
    """HPM faithful and fast, the schedules, the absolute loss, the guard's
    device flags, plain MAE, the EMA feature target, SimMIM, BEiT and iBOT:
    the logs, scores, masks, gradients and weights of 3 steps as pinned."""
    assert step_record(name) == _approx(STEP_PINS[name])
