"""Checkpoint migrations: a checkpoint of an earlier layout, or of a run
whose config changed, read as this run's. Its state-dict keys through the
model's ``upgrade_state_dict``; an optimizer saved with one group per
parameter merged as the constructor merges; a changed run's optimizer
hyper-parameters, schedulers and iteration count those of this config
(``resume_changed_run``). The resume hook
(:class:`~hpm_mm.engine.hooks.ResumeHook`) applies the last two before
mmengine loads the optimizer and schedulers."""
import re
import warnings
from typing import Optional

import torch

from .optimizers.frozen_aware_constructor import merge_groups
from .safe_load import load_file


def checkpoint_state(model: torch.nn.Module, filename) -> dict:
    """The state dict of ``filename`` (through
    :func:`~hpm_mm.engine.safe_load.load_file`; or of a checkpoint already
    loaded, a dict) in ``model``'s keys, for every load alike: its
    ``state_dict`` entry, a DDP wrapper's ``module.`` taken off each key (as
    mmengine's loader does), keys of earlier hpm_mm versions mapped by the
    model's ``upgrade_state_dict`` when it has one."""
    ckpt = filename if isinstance(filename, dict) else load_file(filename)
    state = {
        re.sub(r'^module\.', '', k): v
        for k, v in ckpt.get('state_dict', ckpt).items()
    }
    upgrade = getattr(model, 'upgrade_state_dict', None)
    return upgrade(state) if upgrade is not None else state


def merge_saved(ckpt: dict, optimizer) -> Optional[str]:
    """A resumed checkpoint whose optimizer holds more parameter groups than
    ``optimizer`` (saved before the constructor merged them by setting: one
    per parameter) merged the same way, in place: its state renumbered (an
    FSDP state, keyed by name, keeps its keys), its schedulers' per-group
    values those of each merged group's first. Returns the line that says
    so; None where nothing was merged (torch's own error names a layout
    that still differs)."""
    state = ckpt.get('optimizer') or {}
    saved = state.get('param_groups') or []
    if len(saved) <= len(optimizer.param_groups):
        return None
    merged = merge_groups([  # each parameter as (its group, its saved id)
        dict(g, params=[(i, p) for p in g['params']])
        for i, g in enumerate(saved)
    ])
    if [len(g['params']) for g in merged] != \
            [len(g['params']) for g in optimizer.param_groups]:
        return None
    firsts = [g['params'][0][0] for g in merged]
    order = [p for g in merged for _, p in g['params']]  # FSDP's: names
    new = {p: i if isinstance(p, int) else p for i, p in enumerate(order)}
    state['state'] = {new[p]: v for p, v in state['state'].items()}
    state['param_groups'] = [
        dict(g, params=[new[p] for _, p in g['params']]) for g in merged
    ]
    for scheduler in ckpt.get('param_schedulers') or []:
        for key in set(scheduler) & {'base_values', '_last_value'}:
            scheduler[key] = [scheduler[key][i] for i in firsts]
    return (f"resume: the checkpoint's {len(saved)} optimizer groups (one "
            f'per parameter) merged by setting into {len(merged)}')


def as_this_config(runner, ckpt: dict, schedulers: list,
                   iters_per_epoch: int) -> None:
    """A resumed checkpoint of a changed run, before mmengine loads it, as
    this config's run at the epoch it reached: its iteration count this
    run's (an epoch-based loop's epochs times this run's iterations per
    epoch); ``schedulers`` (this run's, as built) stepped there, as the
    runner's ``ParamSchedulerHook`` does (per iteration, and at each
    epoch's end those by epoch: chained schedulers compute each value from
    the last one), their states and the optimizer's hyper-parameters
    taking the checkpoint's place (its moments stay)."""
    from mmengine.runner import EpochBasedTrainLoop
    meta = ckpt['meta']
    if isinstance(runner.train_loop, EpochBasedTrainLoop):
        meta['iter'] = meta['epoch'] * iters_per_epoch
    by_iter = [s for s in schedulers if not s.by_epoch]
    by_epoch = [s for s in schedulers if s.by_epoch]
    with warnings.catch_warnings():  # (steps before any optimizer step)
        warnings.simplefilter('ignore', UserWarning)
        for i in range(meta['iter']):
            ends = (i + 1) % iters_per_epoch == 0  # an epoch's last
            for s in by_iter + (by_epoch if ends else []):
                s.step()
    wrapper, saved = runner.optim_wrapper, ckpt.get('optimizer') or {}
    pairs = [(wrapper[k], saved[k]) for k in saved] if hasattr(
        wrapper, 'keys') else [(wrapper, saved)]  # (an OptimWrapperDict)
    for w, state in pairs:  # (mmengine's base_lr group: the last)
        groups = list(state.get('param_groups') or [])
        if state.get('base_param_settings') is not None:
            groups.append(state['base_param_settings'])
        for group, built in zip(groups, w.param_groups):
            group.update({k: v for k, v in built.items() if k != 'params'})
    states = [s.state_dict() for s in schedulers]
    if isinstance(ckpt.get('param_schedulers'), dict):  # per optimizer
        ckpt['param_schedulers'][next(iter(ckpt['param_schedulers']))] = states
    elif 'param_schedulers' in ckpt:
        ckpt['param_schedulers'] = states
