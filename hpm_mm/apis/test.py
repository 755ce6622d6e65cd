"""Evaluating a checkpoint with a config's test loop, from Python."""
import os.path as osp
from functools import partial
from typing import Optional, Union

from mmengine.config import Config

from hpm_mm.errors import HPMError
from .config import run_config


def test(config: Union[str, Config],
         checkpoint: str,
         work_dir: Optional[str] = None,
         *,
         out: Optional[str] = None,
         partial_load: bool = False,
         launcher: str = 'none',
         cfg_options: Optional[dict] = None) -> dict:
    """The metrics of ``checkpoint`` on the config's test loop
    (``tools/test.py``). The checkpoint must fit the model (every tensor
    with its shape, none it lacks: else refused unless ``partial_load``) and
    hold no NaN/inf; ``out`` (.json/.yaml/.pkl) is planned before the
    evaluation (:func:`~hpm_mm.engine.work_dir.plan_outputs`: never over an
    input or a file hpm_mm did not write) and written whole or not at all.
    The runner is built without training parts (no lock, no resume checks).

    Raises:
        HPMError: A checkpoint or ``out`` that cannot work, in one line."""
    from hpm_mm.engine.work_dir import MARK, plan_outputs, write_outputs
    cfg = run_config(config, work_dir, launcher, cfg_options)
    ext = osp.splitext(out or '')[1].lower()
    if out:
        if ext not in ('.json', '.yaml', '.yml', '.pkl', '.pickle'):
            raise HPMError(f'--out {out}: unknown format {ext or "(none)"}. '
                           'Fix: end it in .json, .yaml or .pkl.')
        plan_outputs([out],
                     'the metrics (--out)',
                     [p for p in (cfg.filename, checkpoint) if p],
                     fix='--out a new file in a folder you can write')
    parts = ('test_dataloader', 'test_cfg', 'test_evaluator')
    missing = [k for k in parts if cfg.get(k) is None]
    if missing:
        raise HPMError(
            f'{getattr(config, "filename", None) or config} has no test set '
            f'({", ".join(missing)} unset). Fix: for a pretraining config, '
            'tools/analysis_tools/knn_eval.py CONFIG CHECKPOINT.')
    cfg.load_from = checkpoint
    from mmpretrain.utils import get_ori_model

    from hpm_mm.engine.checkpoint_migrations import checkpoint_state
    from hpm_mm.engine.dist import setup_cpu_distributed
    from hpm_mm.engine.safe_load import check_fills, check_finite
    from .train import build_runner
    setup_cpu_distributed(cfg.launcher, cfg)  # gloo + DDP without a GPU
    # an evaluation: no training parts, so hpm_mm's runner takes no work-dir
    # lock and checks no training run (its checkpoint is checked below)
    cfg.train_dataloader = cfg.train_cfg = cfg.optim_wrapper = None
    cfg.param_scheduler, cfg.resume = None, False
    runner = build_runner(cfg)
    model = get_ori_model(runner.model)
    state = checkpoint_state(model, checkpoint)
    check_finite(state, checkpoint)
    if not partial_load:
        check_fills(model, state, checkpoint,
                    'the config it was trained with, or --partial-load', True)
    metrics = runner.test()
    if out:
        from mmengine.fileio import dump
        saved = {MARK: 'test.py', **metrics}  # (the next run writes over it)
        write_outputs({out: partial(dump, saved, file_format=ext[1:])})
    return metrics
