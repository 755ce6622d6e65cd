"""The mask-generator contract (``BaseMaskGenerator``), checked on every
generator registered in mmpretrain's MODELS, then each generator's own
rule."""
import inspect
import os.path as osp

import pytest
import torch
from helpers import DEVICES, REPO
from mmpretrain.registry import MODELS

import hpm_mm  # noqa: F401
from hpm_mm.models import (BaseMaskGenerator, BlockwiseMaskGenerator,
                           HPMMaskGenerator, RandomMaskGenerator)
from hpm_mm.models.mask_generators import IMAGE_SCORES
from hpm_mm.testing.check_mask_generator import (check_image_scores,
                                                 check_invariants,
                                                 check_no_host_sync)


@MODELS.register_module(force=True)
class PatchStdMaskGenerator(HPMMaskGenerator):
    """A generator that scores the images itself (as a user would write one
    outside the library, docs/extending.md): HPM's easy-to-hard rule on each
    patch's pixel standard deviation."""

    score_source = IMAGE_SCORES

    def image_scores(self, inputs, patch_resolution):
        p = inputs.shape[-1] // patch_resolution[1]
        return torch.nn.functional.unfold(inputs, p, stride=p).std(dim=1)


def registered_generators():
    """Every concrete mask generator in the registry (ours and any a user
    registers), with a schedule that uses scores where it can."""
    out = []
    for name, cls in sorted(MODELS.module_dict.items()):
        if inspect.isclass(cls) and issubclass(cls, BaseMaskGenerator) \
                and cls is not BaseMaskGenerator:
            kwargs = dict(
                alpha_0=0.25, alpha_T=0.75) if issubclass(
                    cls, HPMMaskGenerator) else {}
            out.append(pytest.param(cls, kwargs, id=name))
    return out


GENERATORS = registered_generators()


def test_every_generator_is_covered():
    names = {p.id for p in GENERATORS}
    assert {
        'RandomMaskGenerator', 'HPMMaskGenerator', 'AttentionMaskGenerator',
        'BlockwiseMaskGenerator'
    } <= names


def _draw(gen, scores, progress, N, B, device):
    return gen(
        scores if gen.needs_scores(N, progress) else None, progress, N, B,
        device)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('cls,kwargs', GENERATORS)
@pytest.mark.parametrize('N', [16, 64, 196])
def test_contract_invariants(cls, kwargs, N, device):
    """Exact count per row, 0/1 float, on the input's device, seed-
    deterministic, and top-K inclusion for score-ranked generators (the
    library's check, hpm_mm.testing.check_mask_generator, which users run
    on theirs through tools/misc/check_mask_generator.py)."""
    gen = cls(mask_ratio=0.6, **kwargs)
    assert check_invariants(gen, N, device) == []
    if isinstance(gen, HPMMaskGenerator):
        assert gen.num_hard(N, 0.) > 0 and gen.needs_scores(N, 0.)


IMAGE_GENERATORS = [
    p for p in GENERATORS if p.values[0].score_source == IMAGE_SCORES
]


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('cls,kwargs', IMAGE_GENERATORS)
def test_image_scores_contract(cls, kwargs, device):
    """A generator that scores the images itself (score_source='image'):
    (B, N) finite scores in raster order on the images' device, for one or
    three channels, with no read back to the host (meta device)."""
    assert check_image_scores(cls(mask_ratio=0.6, **kwargs), device) == []


@pytest.mark.parametrize(
    'ratio', [0.75, [(0., 0.), (0.1, 0.5)]], ids=['fixed', 'per-image'])
@pytest.mark.parametrize('cls,kwargs', GENERATORS)
def test_no_host_synchronisation(cls, kwargs, ratio):
    """On the meta device a tensor has no data: any read back to the host
    (``.item()``, ``bool(t)``, ``nonzero``) raises, so a generator that runs
    there never synchronises. On CUDA, the sync debug mode checks the same
    on the real device."""
    gen = cls(mask_ratio=ratio, **kwargs)
    assert check_no_host_sync(gen) == []
    if torch.cuda.is_available():
        scores = torch.randn(4, 64, device='cuda')
        torch.cuda.set_sync_debug_mode('error')
        try:
            _draw(gen, scores, 1., 64, 4, 'cuda')
        finally:
            torch.cuda.set_sync_debug_mode('default')


def test_the_check_command_needs_no_pytest_and_finds_violations(
        tmp_path, monkeypatch):
    """python tools/misc/check_mask_generator.py MODULE:CLASS: every
    property on one line each, exit 0 on projects/contrast_mask; exit 1
    and the violated property for a generator that masks one patch too
    many; a target that is no generator is one line."""
    import sys

    from helpers import process

    from hpm_mm.errors import HPMError
    from hpm_mm.testing.check_mask_generator import load_generator, report
    project = osp.join(REPO, 'projects', 'contrast_mask')
    monkeypatch.chdir(project)  # the command imports from where it runs
    lines, bad = report(load_generator('contrast_mask:ContrastMaskGenerator'))
    out = '\n'.join(lines)
    assert bad == 0, out
    assert 'ok   image scores' in out and 'every property holds' in out
    (tmp_path / 'bad_mask.py').write_text(
        'from hpm_mm.models import RandomMaskGenerator\n\n\n'
        'class OneTooMany(RandomMaskGenerator):\n'
        '    def forward(self, scores, progress, N, B, device):\n'
        '        mask = super().forward(scores, progress, N, B, device)\n'
        '        mask[:, 0] = 1\n'
        '        return mask\n')
    monkeypatch.delitem(sys.modules, 'bad_mask', raising=False)
    monkeypatch.chdir(tmp_path)
    lines, bad = report(load_generator('bad_mask:OneTooMany'))
    out = '\n'.join(lines)
    assert bad
    assert 'FAIL invariants, 16 patches' in out and 'not num_masked=' in out
    assert 'OneTooMany: 4 properties violated' in out
    with pytest.raises(HPMError, match='^cannot load bad_mask:torch'):
        load_generator('bad_mask:torch')
    # a command of its own, in a new interpreter, without pytest
    proc = process(
        osp.join(REPO, 'tools', 'misc', 'check_mask_generator.py'),
        'contrast_mask:ContrastMaskGenerator',
        cwd=project)
    assert proc.returncode == 0 and 'every property holds' in proc.stdout


@pytest.mark.parametrize('gamma,N,want', [(0.5, 196, 98), (0.75, 196, 147),
                                          (0.9, 196, 177), (0.5, 64, 32),
                                          (0.75, 64, 48), (0.9, 64, 58)])
def test_masked_count_matches_the_authors_and_mmpretrain(gamma, N, want):
    """N - int(N (1 - gamma)): the authors' code and mmpretrain's MAE."""
    from mmpretrain.models.selfsup.mae import MAEViT
    assert BaseMaskGenerator(gamma).num_masked(N) == want
    vit = MAEViT(
        arch=dict(
            embed_dims=8, num_layers=1, num_heads=1, feedforward_channels=8),
        img_size=4 * int(N**.5),
        patch_size=4,
        mask_ratio=gamma)
    x = torch.zeros(1, N, 8)
    assert int(vit.random_masking(x, gamma)[1].sum()) == want


def test_ratios_that_mask_every_patch_are_refused():
    """N - int(N (1 - gamma)) masks at least one patch for any gamma > 0;
    a gamma above 1 - 1/N would mask them all."""
    with pytest.raises(ValueError, match=r'masks 16 of 16 .*\[0.0625, 0.938'):
        RandomMaskGenerator(0.99).check(16)
    assert RandomMaskGenerator(0.01).num_masked(16) == 1
    RandomMaskGenerator(0.01).check(16)
    with pytest.raises(ValueError, match='mask_ratio must be in'):
        RandomMaskGenerator(0.)


@pytest.mark.parametrize('mode', ['argmax', 'argmin'])
@pytest.mark.parametrize('alpha_0,alpha_T', [(0., .5), (0., 1.), (1., 1.),
                                             (.5, 0.)])
def test_contains_top_k_and_k_follows_schedule(mode, alpha_0, alpha_T):
    N, B = 64, 16
    gen = HPMMaskGenerator(0.75, alpha_0, alpha_T, mode)
    num_mask = 48
    for progress in (0., 0.5, 1.):
        alpha = alpha_0 + progress * (alpha_T - alpha_0)
        k = int(alpha * num_mask + 1e-9)
        assert gen.num_hard(N, progress) == k
        scores = torch.randn(B, N)
        mask = gen(scores, progress)
        if k:
            top = scores.topk(k, dim=1, largest=mode == 'argmax').indices
            assert torch.all(mask.gather(1, top) == 1)


def test_random_part_is_uniform_and_random_masking_needs_no_scores():
    gen = HPMMaskGenerator(0.75, 0., 0.)
    assert not gen.uses_scores
    mask = gen(None, 0.3, num_patches=16, batch_size=4000, device='cpu')
    freq = mask.mean(0)
    assert torch.all((freq - 0.75).abs() < 0.04)
    # with half the masked patches chosen by score, the rest stay random
    gen = HPMMaskGenerator(0.5, 0.5, 0.5)
    scores = torch.arange(16.).repeat(4000, 1)  # patches 12..15 hardest
    mask = gen(scores, 0.)
    assert torch.all(mask[:, 12:] == 1)
    freq = mask[:, :12].mean(0)  # 4 of 12 remaining drawn uniformly
    assert torch.all((freq - 4 / 12).abs() < 0.04)


@pytest.mark.parametrize('kwargs,match', [
    (dict(mask_ratio=1.0), 'mask_ratio'),
    (dict(alpha_T=1.5), 'alpha_T'),
    (dict(mode='max'), 'mode'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HPMMaskGenerator(**kwargs)


def _boundary(mask, h):
    """Edges between a masked and a visible patch, per image."""
    m = mask.view(mask.shape[0], h, -1)
    return ((m[:, 1:] != m[:, :-1]).sum(
        (1, 2)) + (m[:, :, 1:] != m[:, :, :-1]).sum((1, 2))).float()


def test_blockwise_masks_rectangles():
    """BEiT-style blocks: far less masked/visible boundary than random
    masking of the same count, every patch reachable, exact count even when
    the blocks cannot cover enough (num_blocks=1)."""
    B, h = 256, 14
    block = BlockwiseMaskGenerator(0.4)(None, 0., h * h, B)
    rand = RandomMaskGenerator(0.4)(None, 0., h * h, B)
    assert _boundary(block, h).mean() < 0.6 * _boundary(rand, h).mean()
    assert torch.all(block.mean(0) > 0.01)  # no patch is never masked
    one = BlockwiseMaskGenerator(0.5, num_blocks=1, max_num_patches=4)
    assert torch.all(one(None, 0., 64, 8).sum(1) == 32)
    with pytest.raises(ValueError, match='input_size'):
        BlockwiseMaskGenerator(0.4)(None, 0., 50, 2)
    wide = BlockwiseMaskGenerator(0.5, input_size=(4, 8))
    assert torch.all(wide(None, 0., 32, 4).sum(1) == 16)


def test_random_generator_is_uniform_and_needs_no_scores():
    gen = RandomMaskGenerator(0.75)
    assert not gen.uses_scores and not gen.needs_scores(16, 0.5)
    freq = gen(None, 0., 16, 4000).mean(0)
    assert torch.all((freq - 0.75).abs() < 0.04)


IBOT = [(0., 0.), (0.1, 0.5)]  # --pred_ratio 0 0.3 --pred_ratio_var 0 0.2


@pytest.mark.parametrize('cls,kwargs', GENERATORS)
def test_per_image_ratios_follow_ibot(cls, kwargs):
    """Ranges per image: half of the images unmasked, the others masked
    10-50% uniformly (N - int(N (1 - r)) patches, as a fixed ratio), each
    row exactly the count drawn for it; the hardest floor(alpha count)
    patches of each image are in its mask."""
    N, B = 196, 4000
    gen = cls(mask_ratio=IBOT, **kwargs)
    assert gen.varies and gen.max_masked(N) == 98
    torch.manual_seed(0)
    counts = gen.counts(B, N)
    assert counts.dtype == torch.long
    assert abs((counts == 0).float().mean() - 0.5) < 0.03
    some = counts[counts > 0].float()
    assert some.min() >= 20 and some.max() <= 98
    assert abs(some.mean() / N - 0.3) < 0.01
    torch.manual_seed(1)
    counts = gen.counts(64, N)
    gen.counts = lambda *a: counts  # the draw the generator uses
    scores = torch.randn(64, N)
    for progress in (0., 1.):
        mask = _draw(gen, scores, progress, N, 64, 'cpu')
        assert torch.equal(mask.sum(1).long(), counts)
        if isinstance(gen, HPMMaskGenerator) and gen.needs_scores(N, progress):
            k = (gen.alpha(progress) * counts).floor().long()
            order = scores.argsort(1, descending=True)
            for row in range(64):
                assert mask[row, order[row, :k[row]]].all(), row


@pytest.mark.parametrize('ratio',
                         [[(0.1, 1.0)], [(0.5, 0.2)], [], [0.3], [(0., 0.)]])
def test_bad_per_image_ratios(ratio):
    with pytest.raises(ValueError, match='mask_ratio'):
        RandomMaskGenerator(ratio).check(16)


def test_a_generator_that_breaks_the_contract_stops_the_first_step():
    """A generator masking one patch too few trained an epoch silently;
    the first step of the model now checks the mask once and names it."""
    from helpers import tiny_hpm
    from mmpretrain.registry import MODELS

    from hpm_mm.models import RandomMaskGenerator

    @MODELS.register_module(force=True)
    class OneTooFew(RandomMaskGenerator):

        def forward(self,
                    scores,
                    progress,
                    num_patches=None,
                    batch_size=None,
                    device=None):
            mask = super().forward(scores, progress, num_patches, batch_size,
                                   device)
            first = mask.argmax(1, keepdim=True)
            return mask.scatter(1, first, 0.)

    from hpm_mm.errors import HPMError
    model = tiny_hpm(mask_generator=dict(type='OneTooFew', mask_ratio=0.75))
    with pytest.raises(
            HPMError,
            match=r'OneTooFew masked \[11\] patches '
            r'per image where mask_ratio=0.75 asks for 12'):
        model.loss(torch.randn(2, 1, 16, 16), [])

    @MODELS.register_module(force=True)
    class OneColumnShort(RandomMaskGenerator):

        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)[:, 1:]

    model = tiny_hpm(
        mask_generator=dict(type='OneColumnShort', mask_ratio=0.75))
    with pytest.raises(HPMError, match=r'\(2, 16\) mask \(got shape \(2, 15'):
        model.loss(torch.randn(2, 1, 16, 16), [])
    good = tiny_hpm()
    good.set_progress(1.)
    good.loss(torch.randn(2, 1, 16, 16), [])
    assert good._mask_checked


def test_the_checker_finds_per_image_faults_and_names_their_cause():
    """docs/extending.md says the checker covers per-image ratios: a
    generator one patch short only then fails exactly that property (it
    passed); one that does not support them is named as such (it was
    blamed for reading tensors back to the host)."""
    from hpm_mm.models import RandomMaskGenerator
    from hpm_mm.testing.check_mask_generator import check

    class ShortPerImage(RandomMaskGenerator):

        def forward(self, scores, progress, N, B, device):
            mask = super().forward(scores, progress, N, B, device)
            if self.varies:  # one patch too few in each masked row
                mask[torch.arange(mask.shape[0]), mask.argmax(1)] = 0
            return mask

    bad = {k: v for k, v in check(ShortPerImage).items() if v}
    assert list(bad) == ['invariants, per-image ratios, 64 patches'], bad
    assert 'that counts() drew for them' in bad[list(bad)[0]][0]

    class FixedOnly(RandomMaskGenerator):

        def forward(self, scores, progress, N, B, device):
            if self.varies:
                raise NotImplementedError('no per-image ratios')
            return super().forward(scores, progress, N, B, device)

    problems = sum(check(FixedOnly).values(), [])
    assert any('no per-image ratios' in p for p in problems), problems
    assert any('fails on the CPU already' in p for p in problems)
    assert not any('reads tensors back to the host' in p for p in problems)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('mode', ['argmax', 'argmin'])
def test_nan_scores_rank_last(mode, device):
    """Non-finite scores (a diverged teacher, before the step's guard skips
    the update) still give a mask of the exact count: a NaN ranks last,
    an infinity first. On CUDA, topk over NaN rows returned indices out of
    range and the scatter stopped the process with a device assert (the
    fed fast step on the H200, docs/results/gpu/)."""
    gen = HPMMaskGenerator(
        mask_ratio=0.75, alpha_0=0.5, alpha_T=0.5, mode=mode)
    scores = torch.randn(512, 196, device=device)
    scores[0] = float('nan')  # a whole row
    scores[1, :100] = float('nan')  # part of one
    hard = float('inf') if mode == 'argmax' else float('-inf')
    scores[2, 7] = hard
    mask = gen(scores, 1.0, 196, 512, device)
    k = gen.num_hard(196, 1.0)
    assert k > 0 and (mask.sum(1) == 147).all()
    assert mask[2, 7] == 1
    keys = scores[1].nan_to_num(-hard)  # the K hardest of the finite ones
    top = torch.topk(keys, k, largest=mode == 'argmax').indices
    assert (mask[1, top] == 1).all() and (top >= 100).all()
