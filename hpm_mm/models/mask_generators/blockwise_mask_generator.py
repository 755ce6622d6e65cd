import math

import torch
from mmengine.utils import to_2tuple
from mmpretrain.registry import MODELS

from .base import BaseMaskGenerator


@MODELS.register_module()
class BlockwiseMaskGenerator(BaseMaskGenerator):
    """BEiT's block-wise masking, vectorised on the device: each image draws
    ``num_blocks`` rectangles (area uniform in ``[min_num_patches,
    max_num_patches]``, default up to the count masked; aspect log-uniform
    from ``min_aspect``); a patch's key is the index of the first rectangle
    covering it, so sorting adds whole rectangles until :meth:`num_masked`
    (the last one cut; uncovered patches fill any rest). Needs no scores;
    per-image ratios (iBOT) lay up to each image's count. ``mask_ratio``
    defaults to 0.4 (BEiT's 75 of 196), ``input_size`` to the square grid.

    Args:
        mask_ratio (float | tuple): the share of patches masked (a range: per
            image). Defaults to 0.4, BEiT's.
        input_size (int | tuple, optional): the patch grid. Defaults to None:
            the square grid of the model.
        min_num_patches (int): a rectangle's smallest area. Defaults to 4.
        max_num_patches (int, optional): a rectangle's largest area. Defaults
            to None: the count masked.
        min_aspect (float): the aspect's lower bound (log-uniform up to its
            inverse). Defaults to 0.3.
        num_blocks (int): rectangles drawn per image. Defaults to 32.
    """

    def __init__(self,
                 mask_ratio: float = 0.4,
                 input_size=None,
                 min_num_patches: int = 4,
                 max_num_patches=None,
                 min_aspect: float = 0.3,
                 num_blocks: int = 32) -> None:
        super().__init__(mask_ratio)
        self.input_size = tuple(to_2tuple(input_size)) if input_size else None
        if min_num_patches < 1 or num_blocks < 1 or not 0 < min_aspect <= 1:
            raise ValueError('BlockwiseMaskGenerator needs min_num_patches, '
                             'num_blocks >= 1 and 0 < min_aspect <= 1.')
        self.min_num_patches = min_num_patches
        self.max_num_patches = max_num_patches
        self.log_aspect = (math.log(min_aspect), math.log(1 / min_aspect))
        self.num_blocks = num_blocks

    def grid(self, num_patches: int):
        h, w = self.input_size or (round(num_patches**.5), ) * 2
        if h * w != num_patches:
            raise ValueError(f'{num_patches} patches are not a {h}x{w} grid. '
                             'Fix: input_size=(h, w) of the patch grid.')
        return h, w

    def keys(self,
             batch_size,
             num_patches,
             device=None,
             counts=None) -> torch.Tensor:
        """Priorities in (0, 1]: patches of earlier rectangles first.
        Rectangles are sized for :meth:`num_masked`, or for ``counts[i]`` in
        row i."""
        B, N = batch_size, num_patches
        h, w = self.grid(N)
        target = counts.view(B, 1, 1).float() if counts is not None else \
            torch.full((B, 1, 1), float(self.num_masked(N)), device=device)
        low = target.clamp(max=self.min_num_patches)
        high = target if self.max_num_patches is None else \
            low.clamp(min=self.max_num_patches)
        M = self.num_blocks
        area = low + torch.rand(B, M, 1, device=device) * (high - low)
        aspect = torch.exp(self.log_aspect[0] +
                           torch.rand(B, M, 1, device=device) *
                           (self.log_aspect[1] - self.log_aspect[0]))
        bh = torch.sqrt(area * aspect).round().clamp(1, h)
        bw = torch.sqrt(area / aspect).round().clamp(1, w)
        top = (torch.rand(B, M, 1, device=device) * (h - bh + 1)).floor()
        left = (torch.rand(B, M, 1, device=device) * (w - bw + 1)).floor()
        rows = torch.arange(N, device=device) // w  # (N,)
        cols = torch.arange(N, device=device) % w
        inside = ((rows >= top) & (rows < top + bh) & (cols >= left) &
                  (cols < left + bw))  # (B, M, N)
        block = torch.arange(M, device=device).view(1, M, 1)
        first = torch.where(inside, block, M).amin(1).float()  # (B, N)
        # earlier rectangles first; inside one, raster order (a cut keeps
        # its top rows); uncovered patches last, in random order
        raster = torch.arange(N, device=device) / N
        order = first + torch.where(first < M, raster,
                                    torch.rand(B, N, device=device))
        return 1. - order / (M + 1)
