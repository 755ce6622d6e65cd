import re
from typing import List

import torch.nn as nn
from mmdet.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """Layer-wise lr decay for a plain-ViT backbone in mmdet.

    mmdet 3.3 has no such constructor. A parameter of block ``i`` of
    ``backbone.layers`` gets ``lr * decay ** (num_layers - i)``; the patch
    embedding, position embeddings and tokens get
    ``decay ** (num_layers + 1)``; everything outside the backbone (neck,
    heads) gets the full lr. Norms, biases, position embeddings and the
    relative-position tables get no weight decay.

    ``paramwise_cfg``: ``layer_decay_rate`` (float) and ``num_layers`` (int).
    """

    NO_DECAY = ('pos_embed', 'cls_token', 'rel_pos_h', 'rel_pos_w')

    def layer_id(self, name: str, num_layers: int) -> int:
        if not name.startswith('backbone.'):
            return num_layers + 1
        m = re.match(r'backbone\.layers\.(\d+)\.', name)
        if m:
            return int(m.group(1)) + 1
        if any(k in name for k in ('patch_embed', 'pos_embed', 'cls_token')):
            return 0
        return num_layers  # e.g. a final norm of the backbone

    def add_params(self, params: List[dict], module: nn.Module,
                   **kwargs) -> None:
        rate = self.paramwise_cfg.get('layer_decay_rate', 1.0)
        num_layers = self.paramwise_cfg['num_layers']
        wd = self.base_wd or 0.
        groups = {}
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            no_decay = (param.ndim == 1 or name.endswith('.bias')
                        or any(k in name for k in self.NO_DECAY))
            lid = self.layer_id(name, num_layers)
            key = (lid, no_decay)
            if key not in groups:
                groups[key] = dict(
                    params=[],
                    lr=self.base_lr * rate**(num_layers + 1 - lid),
                    weight_decay=0. if no_decay else wd,
                    param_names=[])
            groups[key]['params'].append(param)
            groups[key]['param_names'].append(name)
        params.extend(groups.values())
        print_log(
            f'layer decay {rate}: {len(groups)} parameter groups, lr scale '
            f'{rate**(num_layers + 1):.3g} (patch embed) .. 1 (heads)',
            logger='current')
