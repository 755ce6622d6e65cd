"""The mask-generator contract, checked on any generator class: the
properties of :class:`~hpm_mm.models.BaseMaskGenerator` (docs/extending.md)
the test suite checks on every registered generator. No pytest needed (the
pretraining install); the command is
``python tools/misc/check_mask_generator.py MODULE:CLASS``.
"""
import importlib
import sys
from typing import Dict, List, Tuple

import torch

from hpm_mm.errors import HPMError
from hpm_mm.models.mask_generators import (IMAGE_SCORES, BaseMaskGenerator,
                                           HPMMaskGenerator)


def _draw(gen, scores, progress, N, B, device):
    return gen(
        scores if gen.needs_scores(N, progress) else None, progress, N, B,
        device)


def check_invariants(gen: BaseMaskGenerator,
                     N: int,
                     device: str = 'cpu') -> List[str]:
    """Exact count per row (:meth:`num_masked`; with per-image ratios the
    row's count that :meth:`counts` draws first under the same seed), 0/1
    float, on the asked device, seed-deterministic, float log values; top-K
    inclusion for HPM's rule."""
    problems, B = [], 32
    scores = torch.randn(B, N, device=device)
    for progress in (0., 0.5, 1.):
        at = f'N={N}, progress={progress}'
        torch.manual_seed(0)
        want = gen.counts(B, N, device)  # None for a fixed ratio
        torch.manual_seed(0)
        mask = _draw(gen, scores, progress, N, B, device)
        if mask.shape != (B, N) or mask.dtype != torch.float32:
            got = f'{tuple(mask.shape)} {mask.dtype}'
            return [f'{at}: mask {got}, not ({B}, {N}) float32']
        if mask.device.type != torch.device(device).type:
            problems.append(f'{at}: mask on {mask.device}, asked {device}')
        if not set(mask.unique().tolist()) <= {0., 1.}:
            problems.append(f'{at}: values other than 0 and 1')
        rows = mask.sum(1).long()
        expect = torch.full_like(rows, gen.num_masked(N)) if want is None \
            else want.to(rows)
        wrong = (rows != expect).nonzero().flatten()[:3].tolist()
        if wrong:
            drew = f'num_masked={gen.num_masked(N)}' if want is None else \
                f'the {expect[wrong].tolist()} that counts() drew for them'
            problems.append(f'{at}: rows {wrong} mask {rows[wrong].tolist()} '
                            f'patches, not {drew}')
        torch.manual_seed(0)
        if not torch.equal(mask, _draw(gen, scores, progress, N, B, device)):
            problems.append(f'{at}: not deterministic under a seed')
        if not all(
                isinstance(v, float)
                for v in gen.log_vars(N, progress).values()):
            problems.append(f'{at}: log_vars values are not floats')
        if isinstance(gen, HPMMaskGenerator):
            # the K top-scored patches of each row are masked (with
            # per-image ratios, row i's first floor(alpha_t * counts[i]))
            k = gen.num_hard(N, progress)
            if k > 0:
                top = mask.gather(1, scores.topk(k, dim=1).indices)
                k_i = torch.full_like(expect, k) if want is None else \
                    torch.floor(gen.alpha(progress) * expect + 1e-6)
                hard = torch.arange(k, device=top.device) < k_i.unsqueeze(1)
                if not torch.all(top[hard] == 1):
                    problems.append(f'{at}: the top-scored patches chosen '
                                    'by score are not all masked')
    return problems


def check_image_scores(gen: BaseMaskGenerator,
                       device: str = 'cpu') -> List[str]:
    """``score_source='image'``: (B, N) finite scores on the images'
    device, for 1 and 3 channels, with no read back to the host."""
    problems = []
    for side in (4, 8):
        for channels in (1, 3):
            x = torch.randn(5, channels, 4 * side, 4 * side, device=device)
            scores = gen.image_scores(x, (side, side))
            at = f'{channels} channel(s), {side}x{side} patches'
            if tuple(scores.shape) != (5, side * side):
                problems.append(f'{at}: scores of shape '
                                f'{tuple(scores.shape)}, not (5, {side**2})')
            elif not torch.isfinite(scores).all():
                problems.append(f'{at}: non-finite scores')
        try:
            gen.image_scores(
                torch.randn(2, 1, 4 * side, 4 * side, device='meta'),
                (side, side))
        except Exception as e:  # a read back to the host
            problems.append(f'image_scores reads tensors back to the host '
                            f'({type(e).__name__}: {e})')
    return problems


def check_no_host_sync(gen: BaseMaskGenerator) -> List[str]:
    """No read back to the host (on the meta device any would raise); a
    draw that fails on the CPU too is named as what it is."""
    for device, why in (('cpu', 'fails on the CPU already, so not for a '
                         'read back to the host'),
                        ('meta', 'reads tensors back to the host')):
        try:
            mask = _draw(gen, torch.randn(4, 64, device=device), 1., 64, 4,
                         device)
        except Exception as e:
            return [f'{why} ({type(e).__name__}: {e})']
    return [] if mask.device.type == 'meta' else ['mask left the device']


def _failing(check_fn, *args) -> List[str]:
    """``check_fn(*args)``'s violations; a draw that raises is one."""
    try:
        return check_fn(*args)
    except Exception as e:
        return [f'the draw fails: {type(e).__name__}: {e}']


def check(cls, kwargs=None, device: str = 'cpu') -> Dict[str, List[str]]:
    """Every property of the contract on ``cls(mask_ratio=0.6,
    **kwargs)``, ratio fixed and per image: {property: violations}."""
    kwargs = dict(kwargs or {})
    if issubclass(cls, HPMMaskGenerator):
        kwargs = dict(dict(alpha_0=0.25, alpha_T=0.75), **kwargs)
    gen = cls(mask_ratio=0.6, **kwargs)
    out = {
        f'invariants, {N} patches': _failing(check_invariants, gen, N, device)
        for N in (16, 64, 196)
    }
    out['no host synchronisation (mask_ratio=0.6)'] = check_no_host_sync(gen)
    per_image = [(0., 0.), (0.1, 0.5)]  # iBOT's: some images unmasked
    try:
        varied = cls(mask_ratio=per_image, **kwargs)
    except Exception as e:
        why = f'{type(e).__name__}: {e}'
        out['per-image ratios'] = [f'mask_ratio={per_image} refused: {why}']
    else:
        out['invariants, per-image ratios, 64 patches'] = _failing(
            check_invariants, varied, 64, device)
        out[f'no host synchronisation (mask_ratio={per_image})'] = \
            check_no_host_sync(varied)
    if gen.score_source == IMAGE_SCORES:
        out['image scores'] = check_image_scores(gen, device)
    return out


def load_generator(target: str) -> type:
    """The class ``MODULE:CLASS``, MODULE imported from the working
    directory (as ``custom_imports`` would), which registers it.

    Raises:
        HPMError: It cannot be loaded, or is no mask generator.
    """
    module, _, name = target.partition(':')
    if '' not in sys.path:
        sys.path.insert(0, '')
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise HPMError(f'cannot load {target} ({e}). Fix: MODULE:CLASS, run '
                       'from the folder of MODULE.py.') from None
    if not (isinstance(cls, type) and issubclass(cls, BaseMaskGenerator)):
        raise HPMError(f'{target} is not a BaseMaskGenerator subclass.')
    return cls


def report(cls, kwargs=None, device: str = 'cpu') -> Tuple[List[str], int]:
    """:func:`check` as lines, a property each (its violations indented)
    and a last one that sums up; and the number of violated properties."""
    lines, bad = [], 0
    for prop, problems in check(cls, kwargs, device).items():
        lines.append(f"{'ok  ' if not problems else 'FAIL'} {prop}" +
                     ''.join(f'\n     {p}' for p in problems))
        bad += bool(problems)
    lines.append(f'{cls.__name__}: ' +
                 ('every property holds' if not bad else
                  f'{bad} propert{"y" if bad == 1 else "ies"} violated'))
    return lines, bad
