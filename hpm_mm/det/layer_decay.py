import re
from typing import List

import torch.nn as nn
from mmdet.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.logging import print_log

from hpm_mm.engine.optimizers import FrozenAwareOptimWrapperConstructor


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(FrozenAwareOptimWrapperConstructor):
    """Layer-wise lr decay for a plain-ViT backbone in mmdet (ViTDet's
    ``get_vit_lr_decay_rate``): block ``i`` gets ``decay ** (num_layers -
    i)``, the embeddings ``decay ** (num_layers + 1)``, the rest the full lr;
    no weight decay on norms and the position embedding.
    ``paramwise_cfg``: ``layer_decay_rate``, ``num_layers``. Its groups are
    plain dicts and frozen parameters one line, as in
    :class:`FrozenAwareOptimWrapperConstructor`."""

    NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm,
             nn.LocalResponseNorm)

    def layer_id(self, name: str, num_layers: int) -> int:
        """ViTDet's ``get_vit_lr_decay_rate``: the patch embedding, position
        embedding and tokens are layer 0, block ``i`` is layer ``i + 1``,
        everything else (other backbone parameters, the neck, the heads) is
        layer ``num_layers + 1``, i.e. the full lr."""
        if name.startswith('backbone.'):
            m = re.match(r'backbone\.layers\.(\d+)\.', name)
            if m:
                return int(m.group(1)) + 1
            if any(
                    k in name
                    for k in ('patch_embed', 'pos_embed', 'cls_token')):
                return 0
        return num_layers + 1

    def add_params(self, params: List[dict], module: nn.Module,
                   **kwargs) -> None:
        rate = self.paramwise_cfg.get('layer_decay_rate', 1.0)
        num_layers = self.paramwise_cfg['num_layers']
        wd = self.base_wd or 0.
        groups = {}
        norm_params = {
            id(p)
            for m in module.modules() if isinstance(m, self.NORMS)
            for p in m.parameters(recurse=False)
        }
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            no_decay = id(param) in norm_params or 'pos_embed' in name
            lid = self.layer_id(name, num_layers)
            group = groups.setdefault(
                (lid, no_decay),
                dict(
                    params=[],
                    lr=self.base_lr * rate**(num_layers + 1 - lid),
                    weight_decay=0. if no_decay else wd,
                    param_names=[]))
            group['params'].append(param)
            group['param_names'].append(name)
        params.extend(groups.values())
        print_log(
            f'layer decay {rate}: {len(groups)} parameter groups, lr scale '
            f'{rate**(num_layers + 1):.3g} (patch embed) .. 1 (heads)',
            'current')
