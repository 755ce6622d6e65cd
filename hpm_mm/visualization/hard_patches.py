"""The hard patches: the teacher's predicted loss on the full image against
the true loss (averaged over random masks), the mask and the
reconstruction, as the paper's Fig. 2 / S1 / S2."""
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F

from hpm_mm.models.mask_generators import RandomMaskGenerator

#: Panel titles of the score sources.
SCORE_NAMES = dict(
    predicted_loss='predicted loss',
    cls_attention='CLS attention',
    image='image scores')


def spearman(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Spearman rank correlation of each row, (B, N) x (B, N) -> (B,):
    Pearson correlation of the rows' ranks, ties given their average rank
    (``scipy.stats.spearmanr`` row by row, without scipy)."""

    def ranks(x):  # the values below, plus the middle of the ties' ranks
        x = x.detach().double().unsqueeze(-1)
        below, ties = (x.mT < x).sum(-1), (x.mT == x).sum(-1)
        r = below + (ties + 1) / 2
        return r - r.mean(-1, keepdim=True)

    rp, rt = ranks(pred), ranks(target)
    denom = (rp.norm(dim=-1) * rt.norm(dim=-1)).clamp(min=1e-12)
    return ((rp * rt).sum(-1) / denom).float().cpu()


@torch.no_grad()
def analyze_hard_patches(model,
                         inputs: torch.Tensor,
                         progress: float = 1.0,
                         num_masks: int = 8,
                         use_teacher: bool = True,
                         seed: Optional[int] = 0) -> Dict[str, torch.Tensor]:
    """What the figure shows, for a batch of normalised images at ``progress``:
    ``true_loss`` (B, N, averaged over ``num_masks`` random masks),
    ``pred_loss``, ``scores`` (what the mask read), ``shown`` /
    ``shown_name``, ``mask``, ``recon``, ``spearman`` (B,) and ``mask_info``.
    ``use_teacher``: the EMA teacher's scores, as in training."""
    was_training = model.training
    model.eval()
    B, N = inputs.shape[0], model.backbone.num_patches
    gen, head = model.mask_generator, model.head

    def reconstruct(mask: torch.Tensor) -> torch.Tensor:
        latent, ids = model.backbone(inputs, mask.to(inputs.device),
                                     N - gen.num_masked(N))
        return model.neck(latent, ids)[0]

    # what the reconstructor is compared with: the pixels, or a feature
    # target (the EMA teacher's or a frozen network's, paper Tab. 1)
    target = model.target(inputs)

    # true per-patch losses, averaged over MAE's random masks (drawn on the
    # CPU from ``seed``, whatever the device)
    random_masks = RandomMaskGenerator(mask_ratio=gen.mask_ratio)
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        masks = [random_masks(None, 0., N, B, 'cpu') for _ in range(num_masks)]
    total = sum(
        head.patch_losses(reconstruct(m), target).cpu() * m for m in masks)
    true_loss = total / sum(masks).clamp(min=1)

    # the scores the mask reads at this progress (the teacher's, or the
    # generator's own image scores), and the predicted losses on the full
    # image where there is a loss predictor
    teacher = getattr(model, 'teacher', None) if use_teacher else None
    scores = model.mask_scores(inputs, use_teacher).float().cpu() \
        if gen.needs_scores(N, progress) else None
    pred_loss = None
    if model.with_predictor:
        if gen.score_source == 'predicted_loss' and scores is not None:
            pred_loss = scores
        elif teacher is not None and 'scorer' in teacher.module:
            pred_loss = teacher(inputs, scores='predicted_loss').scores.cpu()
        else:
            pred_loss = model.student_scores(inputs).cpu()
    if scores is None and pred_loss is None:
        raise ValueError(f'{type(model).__name__} has neither mask scores at '
                         f'progress {progress} nor a loss predictor.')
    shown = scores if scores is not None else pred_loss
    source = gen.score_source if scores is not None else 'predicted_loss'

    # the mask the generator draws at this progress, and its reconstruction
    if seed is not None:
        torch.manual_seed(seed)
    mask = gen(scores, progress, N, B, torch.device('cpu'))
    if target is not inputs:  # no pixels predicted: show what the student saw
        h, w = model.backbone.patch_resolution
        m = F.interpolate(mask.view(B, 1, h, w), size=inputs.shape[-2:])
        recon = (inputs.float() * (1 - m.to(inputs.device))).cpu()
    else:
        pred = reconstruct(mask).float()
        target = head.patchify(inputs.float())
        if head.norm_pix:  # back to pixel space with each patch's statistics
            mean = target.mean(-1, keepdim=True)
            std = (target.var(-1, keepdim=True) + 1e-6).sqrt()
            pred = pred * std + mean
        m = mask.to(inputs.device).unsqueeze(-1)
        recon = head.unpatchify(pred * m + target * (1 - m)).cpu()
    model.train(was_training)
    return dict(
        true_loss=true_loss,
        pred_loss=pred_loss,
        scores=scores,
        shown=shown,
        shown_name=SCORE_NAMES.get(source, source),
        mask=mask.cpu(),
        recon=recon,
        spearman=spearman(shown, true_loss),
        mask_info=gen.log_vars(N, progress))


def patch_map_to_pixels(values: torch.Tensor, image_size) -> np.ndarray:
    """(B, N) per-patch values -> (B, H, W) bilinearly upsampled maps,
    min-max normalised per image to [0, 1]."""
    side = int(round(values.shape[1]**0.5))
    lo, hi = values.float().aminmax(dim=1, keepdim=True)
    maps = ((values.float() - lo) / (hi - lo).clamp(min=1e-12)).view(
        -1, 1, side, side)
    maps = F.interpolate(
        maps, size=tuple(image_size), mode='bilinear', align_corners=False)
    return maps[:, 0].clamp(0, 1).numpy()


def saliency_mask(pred_loss: torch.Tensor,
                  image_size,
                  quantile: float = 0.5) -> np.ndarray:
    """Foreground mask from the predicted-loss map: pixels whose upsampled,
    normalised predicted loss is above the image's ``quantile``."""
    maps = patch_map_to_pixels(pred_loss, image_size)
    thr = np.quantile(maps.reshape(maps.shape[0], -1), quantile, axis=1)
    return maps > thr[:, None, None]


def foreground_iou(pred_mask: np.ndarray, gt_mask: np.ndarray) -> np.ndarray:
    """IoU of two (B, H, W) boolean masks, per image."""
    inter = np.logical_and(pred_mask, gt_mask).sum(axis=(1, 2))
    union = np.logical_or(pred_mask, gt_mask).sum(axis=(1, 2))
    return inter / np.maximum(union, 1)


def _to_display(img: torch.Tensor, preprocessor) -> np.ndarray:
    """(C, H, W) normalised by ``preprocessor`` -> (H, W[, 3]) in [0, 1]."""
    x = img.float().cpu() * preprocessor.std.view(-1, 1, 1).cpu() + \
        preprocessor.mean.view(-1, 1, 1).cpu()
    x = (x / 255.).clamp(0, 1).numpy()
    return x[0] if x.shape[0] == 1 else x.transpose(1, 2, 0)


def fixed_samples(loader_cfg: dict, num: int) -> tuple:
    """``num`` samples spread evenly over the dataset of ``loader_cfg``
    (the same ones every time), and their indices."""
    from mmengine.registry import DATASETS
    dataset = DATASETS.build(loader_cfg['dataset'])
    idx = np.linspace(0, len(dataset) - 1, num).astype(int)
    return [dataset[i] for i in idx], idx


def draw_hard_patches(result: Dict[str, torch.Tensor],
                      inputs: torch.Tensor,
                      index: int,
                      preprocessor,
                      out_file: Optional[str] = None,
                      dpi: int = 100) -> np.ndarray:
    """One row of five panels and a colour bar (input, true loss, the scores
    the mask read, the mask with its scalars, the reconstruction) of image
    ``index``, its pixels un-normalised by ``preprocessor``; returns RGB."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    H, W = inputs.shape[-2:]
    img = _to_display(inputs[index], preprocessor)
    recon = _to_display(result['recon'][index], preprocessor)
    true_map, pred_map = patch_map_to_pixels(
        torch.stack([result['true_loss'][index], result['shown'][index]]),
        (H, W))
    gray = img.ndim == 2
    # the mask's patches as a grey veil (visible even on black background)
    side = int(round(result['mask'].shape[1]**0.5))
    veil = np.kron(result['mask'][index].view(side, -1).numpy(),
                   np.ones((H // side, H // side))).astype(bool)[:H, :W]
    masked_view = np.stack([img] * 3, -1) if gray else img.copy()
    masked_view[veil] = masked_view[veil] * 0.3 + 0.45

    fig, axes = plt.subplots(1, 5, figsize=(12.5, 2.9), dpi=dpi)
    fig.subplots_adjust(
        left=0.01, right=0.92, bottom=0.02, top=0.88, wspace=0.05)
    cmap = 'gray' if gray else None
    rho = float(result['spearman'][index])
    info = ' '.join(f'{k}={v:g}' for k, v in result['mask_info'].items())
    panels = [
        (img, 'input', cmap),
        (true_map, 'true loss (avg. masks)', 'jet'),
        (pred_map, f'{result["shown_name"]} (rho={rho:.2f})', 'jet'),
        (masked_view, f'mask (grey) {info}'.strip(), None),
        (recon, 'reconstruction', cmap),
    ]
    for ax, (data, title, cm) in zip(axes, panels):
        ax.imshow(data, cmap=cm, vmin=0, vmax=1)
        ax.set_title(title, fontsize=9)
        ax.axis('off')
    cbar = fig.colorbar(
        axes[2].images[0], ax=axes.tolist(), fraction=0.02, pad=0.01)
    cbar.set_ticks([0, 1], labels=['easy', 'hard'])
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    if out_file is not None:
        fig.savefig(out_file, dpi=dpi)
    plt.close(fig)
    return rgb
