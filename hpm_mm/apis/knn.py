"""Frozen-encoder evaluation of a checkpoint from Python: kNN (DINO
protocol) and linear probes on cached features."""
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


def knn_hook(cfg: Config, required: bool = True) -> Optional[dict]:
    """The config's ``KNNEvalHook`` (its labelled data); without one None,
    or (``required``) one HPMError line."""
    hook = next((h for h in cfg.get('custom_hooks', [])
                 if h.get('type') == 'KNNEvalHook'), None)
    if hook is None and required:
        raise HPMError(f'{cfg.filename or "the config"} has no KNNEvalHook '
                       '(its labelled data). Fix: add one to custom_hooks.')
    return hook


def frozen_eval(config: Union[str, Config],
                checkpoint: Optional[str] = None,
                features: Sequence[str] = ('avg', ),
                ks: Optional[Sequence[int]] = None,
                temperature: Optional[float] = None,
                linear: bool = False,
                seed: int = 0,
                teacher: bool = False,
                amp: bool = False,
                raw_pixels: bool = False,
                layer: Optional[int] = None,
                log=None) -> dict:
    """kNN (DINO protocol) and, with ``linear``, linear-probe top-1 of
    ``checkpoint``'s frozen encoder for each of ``features``, from one pass
    over the labelled data of the config's ``KNNEvalHook`` (so this and the
    evaluation during training agree). ``ks``, ``temperature`` and ``layer``
    default to the hook's; ``teacher`` evaluates the EMA teacher's encoder;
    ``amp`` is ``precision='auto'``; ``raw_pixels`` the normalised pixels'
    baseline; ``log`` gets each progress line.

    Returns:
        dict: ``knn`` ({feature: {k: top-1 %}}), ``linear``, ``temperature``,
        ``precision``, ``num_train``, ``num_val``."""
    from mmengine.runner import Runner

    from hpm_mm.engine.precision import run_precision
    from hpm_mm.evaluation import (bank_and_evaluated, knn_classify,
                                   linear_probe, model_device)
    from .model import load_model
    log = log or (lambda line: None)
    cfg = load_config(config)
    hook = knn_hook(cfg)
    ks = list(ks or hook.get('ks', (10, 20, 100, 200)))
    if any(not isinstance(k, int) or k < 1 for k in ks):
        raise HPMError(f'ks {ks}: not counts. Fix: e.g. 10 20 100 200.')
    layer = hook.get('layer') if layer is None else layer
    temperature = hook.get('temperature', 0.07) if temperature is None \
        else temperature
    if not temperature > 0:
        raise HPMError(f'temperature {temperature}: not positive. Fix: '
                       'e.g. 0.07 (DINO).')
    if raw_pixels:
        model = PixelFeatures(load_model(cfg).data_preprocessor)
        features, layer = ('avg', ), None
    elif checkpoint is None:
        raise HPMError('knn_eval needs a checkpoint (or raw_pixels=True).')
    else:
        # the encoder only is read: the rest may be absent
        model = load_model(cfg, checkpoint, teacher, required='backbone.')
    loaders = {
        split: Runner.build_dataloader(hook[f'{split}_dataloader'], seed=0)
        for split in ('train', 'val')
    }
    precision = run_precision(  # the config's, as in its training run
        dict(precision='auto' if amp else cfg.get('precision') or 'fp32'),
        model_device(model))
    log(precision.line())
    kw = dict(feature=tuple(features), amp=precision.dtype, layer=layer)
    try:
        train, val, warnings = bank_and_evaluated(model, loaders, log, **kw)
    except ValueError as e:  # a layer the encoder does not have
        raise HPMError(str(e)) from None
    for warning in warnings:
        log(f'warning: {warning}')
    out = dict(
        warnings=warnings,
        knn={},
        layer=layer,
        temperature=temperature,
        precision=precision.name,
        num_train=len(train['labels']),
        num_val=len(val['labels']))
    for f in features:
        data = (train['feats'][f], train['labels'], val['feats'][f],
                val['labels'])
        out['knn'][f] = knn_classify(*data, ks, temperature)
        if linear:
            out.setdefault('linear', {})[f] = linear_probe(
                *data, seed=seed)['top1']
    return out


def knn_eval(config: Union[str, Config],
             checkpoint: Optional[str] = None,
             ks: Optional[Sequence[int]] = None,
             temperature: Optional[float] = None,
             feature: Optional[str] = None,
             teacher: bool = False,
             amp: bool = False,
             raw_pixels: bool = False,
             layer: Optional[int] = None,
             log=None) -> dict:
    """kNN top-1 of ``checkpoint``'s encoder on one feature
    (:func:`frozen_eval`'s kNN part). Returns ``acc`` ({k: top-1 %}),
    ``best_k``, ``best``, ``feature``, ``temperature``, ``precision``,
    ``num_train``, ``num_val``."""
    cfg = load_config(config)
    feature = 'avg' if raw_pixels else (feature
                                        or knn_hook(cfg).get('feature', 'avg'))
    kw = dict(teacher=teacher, amp=amp, raw_pixels=raw_pixels, layer=layer)
    result = frozen_eval(
        cfg, checkpoint, (feature, ), ks, temperature, log=log, **kw)
    acc = result.pop('knn')[feature]
    best = max(acc, key=acc.get)
    return dict(
        acc=acc, best_k=best, best=acc[best], feature=feature, **result)
