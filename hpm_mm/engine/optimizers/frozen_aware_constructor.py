from typing import List

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS  # root: every scope finds it

from hpm_mm.engine.log_filter import drop_log_messages


def frozen_summary(model: nn.Module) -> str:
    """The parameters that do not require gradients, as few names as
    possible: a module all of whose parameters are frozen is named once
    (with its tensor and value counts), other frozen parameters by name.
    Empty when everything is trained."""
    parts, covered = [], ()  # the named modules' prefixes
    for name, module in model.named_modules():
        own = list(module.parameters())
        if name and own and not name.startswith(covered) and not any(
                p.requires_grad for p in own):
            covered += (name + '.', )
            parts.append(f'{name} ({len(own)} tensors, '
                         f'{sum(p.numel() for p in own):,} values)')
    parts += [
        name for name, p in model.named_parameters()
        if not p.requires_grad and not name.startswith(covered)
    ]
    return ', '.join(parts)


def merge_groups(groups: List[dict]) -> List[dict]:
    """One parameter group per distinct setting (every key but ``params``),
    in the order first met, its parameters in their order: AdamW runs once
    per group, and ``paramwise_cfg`` makes one per parameter."""
    merged = {}
    for g in groups:
        key = repr(sorted((k, v) for k, v in g.items() if k != 'params'))
        merged.setdefault(key, dict(g, params=[]))['params'] += g['params']
    return list(merged.values())


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class FrozenAwareOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """mmengine's default constructor, its one warning per frozen parameter
    (hundreds for a ViT-B's teacher) replaced by one INFO line naming them;
    its parameter groups merged by setting (:func:`merge_groups`: ViT-B's
    352 are 2) into plain dicts: mmengine's are ConfigDicts, whose every
    read (``group['lr']``, by the optimizer, the schedulers and the guard)
    goes through addict (docs/speed.md). A checkpoint saved with one group
    per parameter resumes through
    :func:`hpm_mm.engine.checkpoint_migrations.merge_saved`."""

    def __call__(self, model: nn.Module) -> OptimWrapper:
        with drop_log_messages('is skipped since its requires_grad=False'):
            wrapper = super().__call__(model)
        wrapper.optimizer.param_groups[:] = merge_groups(
            wrapper.optimizer.param_groups)
        frozen = frozen_summary(model)
        if frozen:
            print_log(f'not optimised (requires_grad=False): {frozen}',
                      'current')
        return wrapper
