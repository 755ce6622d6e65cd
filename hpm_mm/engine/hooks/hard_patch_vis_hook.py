import os
import os.path as osp
from typing import Optional

from mmengine.dataset import default_collate
from mmpretrain.registry import HOOKS
from mmpretrain.utils import get_ori_model

from .eval_hook_base import AfterCheckpointEvalHook


@HOOKS.register_module()
class HardPatchVisHook(AfterCheckpointEvalHook):
    """Draw the hard-patch grids of ``num_images`` fixed held-out images
    (``dataloader``) into ``{work_dir}/hard_patches/`` (and the visualizer)
    every ``interval`` and after the last epoch, as the pictures tool does
    (the mask at ``progress``, default the model's; the true loss over
    ``num_masks`` masks), and log ``hpm/spearman``.

    Args:
        dataloader (dict): the loader of the held-out images drawn.
        num_images (int): images per grid. Defaults to 4.
        interval (int): epochs (or iterations) between two drawings. Defaults
            to 1.
        by_epoch (bool): whether ``interval`` counts epochs. Defaults to True.
        progress (float, optional): training progress t/T at which the mask is
            drawn. Defaults to None: the model's current one.
        num_masks (int): random masks the true per-patch loss is averaged over.
            Defaults to 4.
    """

    rerun_tool = 'tools/analysis_tools/visualize_hard_patches.py'

    def __init__(self,
                 dataloader: dict,
                 num_images: int = 4,
                 interval: int = 1,
                 by_epoch: bool = True,
                 progress: Optional[float] = None,
                 num_masks: int = 4) -> None:
        self.dataloader_cfg = dataloader
        self.num_images = num_images
        self.interval = interval
        self.by_epoch = by_epoch
        self.progress = progress
        self.num_masks = num_masks
        self._samples = None

    def evaluate(self, runner, tag: str) -> float:
        """Draw the grids; return the mean Spearman correlation."""
        from hpm_mm.visualization import (analyze_hard_patches,
                                          draw_hard_patches, fixed_samples)
        if self._samples is None:
            self._samples = fixed_samples(self.dataloader_cfg,
                                          self.num_images)[0]
        model = get_ori_model(runner.model)
        inputs = model.data_preprocessor(
            default_collate(self._samples), False)['inputs']
        progress = model.progress if self.progress is None else self.progress
        result = analyze_hard_patches(model, inputs, progress, self.num_masks)
        out_dir = osp.join(runner.work_dir, 'hard_patches')
        os.makedirs(out_dir, exist_ok=True)
        for i in range(inputs.shape[0]):
            rgb = draw_hard_patches(result, inputs, i, model.data_preprocessor,
                                    osp.join(out_dir, f'{tag}_img{i}.png'))
            runner.visualizer.add_image(
                f'hard_patches_img{i}', rgb, step=runner.iter)
        rho = float(result['spearman'].mean())
        runner.message_hub.update_scalar('hpm/spearman', rho)
        runner.visualizer.add_scalars({'hpm/spearman': rho}, step=runner.iter)
        runner.logger.info(f'hard patches ({tag}): Spearman(pred, true) = '
                           f'{rho:.3f}; grids in {out_dir}')
        return rho

    def final_done(self, runner) -> bool:
        return osp.exists(
            osp.join(runner.work_dir, 'hard_patches',
                     f'{self.final_tag(runner)}_img0.png'))
