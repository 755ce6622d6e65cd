import os.path as osp
from typing import Optional, Sequence

from mmengine.dist import is_main_process
from mmengine.fileio import dump, load
from mmengine.runner import Runner
from mmpretrain.registry import HOOKS
from mmpretrain.utils import get_ori_model

from hpm_mm.engine.precision import run_precision
from hpm_mm.evaluation import (FEATURES, bank_and_evaluated, knn_classify,
                               model_device)
from .eval_hook_base import AfterCheckpointEvalHook


@HOOKS.register_module()
class KNNEvalHook(AfterCheckpointEvalHook):
    """DINO-style kNN evaluation of the encoder during pretraining, every
    ``interval`` (0: only after training) and after the last epoch, after the
    epoch's checkpoint: ``knn/top1_k{k}`` and ``knn/top1_best`` logged,
    ``{work_dir}/knn.json`` written. ``knn_eval.py`` reads the same hook
    config. ``train_dataloader`` is the labelled bank, ``val_dataloader`` the
    evaluated images; ``feature`` ``'avg'`` (the paper) or ``'cls'`` (the
    authors' scripts); ``amp`` True/False overrides the run's precision
    (None); ``layer`` reads an encoder block's tokens instead of the output.

    Args:
        train_dataloader (dict): the labelled bank.
        val_dataloader (dict): the evaluated images.
        interval (int): epochs (or iterations) between evaluations; 0: only
            after training. Defaults to 0.
        by_epoch (bool): whether ``interval`` counts epochs. Defaults to True.
        ks (Sequence[int]): the neighbour counts. Defaults to (10, 20, 100,
            200), DINO's.
        temperature (float): the vote weighs a neighbour by ``exp(similarity /
            T)``. Defaults to 0.07.
        feature (str): ``'avg'`` (the patch tokens averaged, the paper) or
            ``'cls'`` (the authors' scripts). Defaults to 'avg'.
        amp (bool, optional): True / False overrides the run's precision.
            Defaults to None: the run's.
        layer (int, optional): an encoder block whose tokens are read
            (negative: from the end). Defaults to None: the encoder's output.
    """

    rerun_tool = 'tools/analysis_tools/knn_eval.py'

    def __init__(self,
                 train_dataloader: dict,
                 val_dataloader: dict,
                 interval: int = 0,
                 by_epoch: bool = True,
                 ks: Sequence[int] = (10, 20, 100, 200),
                 temperature: float = 0.07,
                 feature: str = 'avg',
                 amp: Optional[bool] = None,
                 layer: Optional[int] = None) -> None:
        self.loader_cfgs = dict(train=train_dataloader, val=val_dataloader)
        self.loaders = None
        self.interval = interval
        self.by_epoch = by_epoch
        self.ks = tuple(ks)
        self.temperature = temperature
        if feature not in FEATURES:
            raise ValueError(f'feature must be one of {FEATURES}, got '
                             f'{feature!r}.')
        self.feature = feature
        self.amp = amp
        self.layer = layer
        self.last_result: Optional[dict] = None  # docs/extending.md

    def evaluate(self, runner, tag: str = '') -> dict:
        """Extract features and run kNN; log and return ``{k: acc}``."""
        if self.loaders is None:
            self.loaders = {
                k: Runner.build_dataloader(cfg, seed=runner.seed)
                for k, cfg in self.loader_cfgs.items()
            }
        model = get_ori_model(runner.model)
        # as asked, else the run's (HPMRunner's; another runner's: its
        # config's, by the same rule)
        precision = getattr(runner, 'precision', None)
        if precision is None or self.amp is not None:
            precision = run_precision(
                runner.cfg if self.amp is None else dict(
                    precision='auto' if self.amp else 'fp32'),
                model_device(model))
        train, val, warnings = bank_and_evaluated(
            model,
            self.loaders,
            lambda line: runner.logger.info(line, extra=dict(console=True)),
            progress=is_main_process(),
            feature=self.feature,
            amp=precision.dtype,
            layer=self.layer)
        for warning in warnings:
            runner.logger.warning(f'kNN: {warning}')
        acc = knn_classify(train['feats'], train['labels'], val['feats'],
                           val['labels'], self.ks, self.temperature)
        scalars = {f'knn/top1_k{k}': v for k, v in acc.items()}
        scalars['knn/top1_best'] = max(acc.values())
        runner.message_hub.update_scalars(scalars)
        runner.visualizer.add_scalars(scalars, step=runner.iter)
        runner.logger.info(
            'kNN top-1 (T=%.2f, %s features, %s): %s', self.temperature,
            self.feature, precision.name,
            '  '.join(f'k={k}: {v:.2f}' for k, v in acc.items()))
        self.last_result = acc
        if is_main_process():
            best = max(acc, key=acc.get)
            done = self.at_end(runner)  # a finished run's final evaluation
            dump(
                dict(
                    acc=acc,  # (json writes the keys as strings)
                    best_k=best,
                    best=acc[best],
                    feature=self.feature,
                    layer=self.layer,
                    precision=precision.name,
                    # the epochs / iterations trained when it ran: the
                    # loop counts the current one only after its hooks,
                    # except at a finished run's evaluation (run_final)
                    epoch=runner.epoch +
                    (0 if done or not self.by_epoch else 1),
                    iter=runner.iter + (0 if done or self.by_epoch else 1),
                    num_train=len(train['labels']),
                    num_val=len(val['labels']),
                    warnings=warnings),
                osp.join(runner.work_dir, 'knn.json'),
                indent=2)
        return acc

    def final_done(self, runner) -> bool:
        path = osp.join(runner.work_dir, 'knn.json')
        key = 'epoch' if self.by_epoch else 'iter'
        return osp.exists(path) and load(path).get(key) == getattr(runner, key)
