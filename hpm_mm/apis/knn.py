"""kNN evaluation of a checkpoint (DINO protocol) from Python."""
from typing import Optional, Sequence, Union

import torch
from mmengine.config import Config

from hpm_mm.errors import HPMError
from .config import load_config


class PixelFeatures(torch.nn.Module):
    """Stand-in model whose features are the normalised pixels (the raw-pixel
    baseline)."""

    def __init__(self, data_preprocessor):
        super().__init__()
        self.data_preprocessor = data_preprocessor

    def extract_feat(self, inputs):
        return inputs.flatten(1)


@torch.no_grad()
def knn_eval(config: Union[str, Config],
             checkpoint: Optional[str] = None,
             ks: Optional[Sequence[int]] = None,
             temperature: Optional[float] = None,
             feature: Optional[str] = None,
             teacher: bool = False,
             amp: bool = False,
             raw_pixels: bool = False,
             log=None) -> dict:
    """kNN top-1 accuracy of ``checkpoint``'s encoder.

    The memory bank and the evaluated images come from the config's
    ``KNNEvalHook`` (in ``custom_hooks``), so this and the evaluation during
    training agree; ``ks``, ``temperature`` and ``feature`` default to the
    hook's.

    Args:
        config (str | Config): The pretraining config.
        checkpoint (str, optional): Its checkpoint (not needed with
            ``raw_pixels``).
        ks (Sequence[int], optional): Neighbour counts.
        temperature (float, optional): The vote's temperature.
        feature (str, optional): ``'avg'`` (patch tokens averaged) or
            ``'cls'``.
        teacher (bool): Evaluate the EMA teacher's encoder.
        amp (bool): Mixed precision where the hardware computes it faster.
        raw_pixels (bool): The baseline of the normalised pixels.
        log (callable, optional): Called with each progress line.

    Returns:
        dict: ``acc`` ({k: top-1 %}), ``best_k``, ``best``, ``feature``,
        ``temperature``, ``precision``, ``num_train``, ``num_val``.
    """
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from hpm_mm.engine.precision import choose_precision
    from hpm_mm.evaluation import extract_features, knn_classify
    from .model import load_model
    log = log or (lambda line: None)
    cfg = load_config(config) if isinstance(config, str) else config
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    hooks = [
        h for h in cfg.get('custom_hooks', [])
        if h.get('type') == 'KNNEvalHook'
    ]
    if not hooks:
        raise HPMError(
            f'{cfg.filename or "the config"} has no KNNEvalHook in '
            'custom_hooks, so it does not say which labelled data to use. '
            'Fix: add dict(type="KNNEvalHook", train_dataloader=..., '
            'val_dataloader=...) to custom_hooks.')
    hook = hooks[0]
    ks = ks or hook.get('ks', (10, 20, 100, 200))
    temperature = temperature or hook.get('temperature', 0.07)
    feature = feature or hook.get('feature', 'avg')
    if raw_pixels:
        model = PixelFeatures(load_model(cfg).data_preprocessor)
        feature = 'avg'
    elif checkpoint is None:
        raise HPMError('knn_eval needs a checkpoint (or raw_pixels=True).')
    else:
        model = load_model(cfg, checkpoint, teacher=teacher)
    device = next(model.parameters(), torch.empty(0)).device.type
    precision = choose_precision(amp, device)
    log(precision.line())
    feats = {}
    for split in ('train', 'val'):
        loader = Runner.build_dataloader(hook[f'{split}_dataloader'], seed=0)
        log(f'extracting {split} features ({len(loader.dataset)} images)')
        feats[split] = extract_features(
            model, loader, feature=feature, amp=amp)
    acc = knn_classify(feats['train']['feats'], feats['train']['labels'],
                       feats['val']['feats'], feats['val']['labels'], ks,
                       temperature)
    best = max(acc, key=acc.get)
    return dict(
        acc=acc,
        best_k=best,
        best=acc[best],
        feature=feature,
        temperature=temperature,
        precision=precision.name,
        num_train=len(feats['train']['labels']),
        num_val=len(feats['val']['labels']))
