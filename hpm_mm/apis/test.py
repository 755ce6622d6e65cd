"""Evaluating a checkpoint with a config's test loop, from Python."""
import os
import os.path as osp
from typing import Optional, Union

from mmengine.config import Config

from hpm_mm.errors import HPMError
from .config import run_config


def check_out(path: str) -> None:
    """Refuse an ``out`` file that could not be written, before the
    evaluation (mmengine's dump fails only after it): a format dump does not
    know, a folder that does not exist or cannot be written."""
    ext = osp.splitext(path)[1].lower()
    if ext not in ('.json', '.yaml', '.yml', '.pkl', '.pickle'):
        raise HPMError(f'--out {path}: unknown format {ext or "(none)"}. '
                       'Fix: end it in .json, .yaml or .pkl.')
    folder = osp.dirname(osp.abspath(path))
    if not osp.isdir(folder):
        raise HPMError(f'--out {path}: the folder {folder} does not exist. '
                       'Fix: create it, or write elsewhere.')
    if not os.access(folder, os.W_OK) or (osp.exists(path)
                                          and not os.access(path, os.W_OK)):
        raise HPMError(f'--out {path}: {path if osp.exists(path) else folder}'
                       ' cannot be written. Fix: write elsewhere, or give '
                       'yourself write permission.')


def test(config: Union[str, Config],
         checkpoint: str,
         work_dir: Optional[str] = None,
         *,
         out: Optional[str] = None,
         partial_load: bool = False,
         launcher: str = 'none',
         cfg_options: Optional[dict] = None) -> dict:
    """The metrics of ``checkpoint`` on the config's test loop (as
    ``tools/test.py``).

    The checkpoint must fill the model (every tensor present, with its
    shape): a pretraining checkpoint tested with a classifier config is
    refused instead of evaluating a partly random model, unless
    ``partial_load``. A checkpoint holding NaN/inf is refused either way;
    ``out`` is checked before the evaluation. The runner is hpm_mm's, built
    without training parts: no work-dir lock, no run checks, no resume.

    Args:
        config (str | Config): A config file or a loaded config.
        checkpoint (str): The checkpoint (a path or an http(s) URL).
        work_dir (str, optional): Logs; defaults to the config's, else
            ``work_dirs/<config name>``.
        out (str, optional): Also dump the metrics here (.json/.yaml/.pkl).
        partial_load (bool): Evaluate although the checkpoint does not fill
            the model (missing tensors keep their initialisation).
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.
        cfg_options (dict, optional): ``key.sub=value`` overrides, checked.

    Returns:
        dict: The evaluator's metrics.

    Raises:
        HPMError: A checkpoint or ``out`` that cannot work, in one line.
    """
    cfg = run_config(config, work_dir, launcher, cfg_options)
    if out:
        check_out(out)
    missing = [
        k for k in ('test_dataloader', 'test_cfg', 'test_evaluator')
        if cfg.get(k) is None
    ]
    if missing:
        raise HPMError(
            f'{getattr(config, "filename", None) or config} has no test set '
            f'({", ".join(missing)} unset): a pretraining config. Fix: '
            'evaluate its encoder with python tools/analysis_tools/'
            'knn_eval.py CONFIG CHECKPOINT, or fine-tune it with a '
            'benchmark config (configs/benchmarks/) and test that.')
    cfg.load_from = checkpoint
    from mmpretrain.utils import get_ori_model

    from hpm_mm.engine.checkpoint import (checkpoint_mismatch,
                                          checkpoint_state, nonfinite_tensors)
    from hpm_mm.engine.dist import setup_cpu_distributed
    from .train import build_runner
    setup_cpu_distributed(cfg.launcher, cfg)  # gloo + DDP without a GPU
    # an evaluation: no training parts, so hpm_mm's runner takes no work-dir
    # lock and checks no training run (its checkpoint is checked below)
    cfg.train_dataloader = cfg.train_cfg = cfg.optim_wrapper = None
    cfg.param_scheduler, cfg.resume = None, False
    runner = build_runner(cfg)
    model = get_ori_model(runner.model)
    state = checkpoint_state(model, checkpoint)
    problem = nonfinite_tensors(state, checkpoint)
    if problem:
        raise HPMError(f'{problem}. Fix: test an earlier checkpoint of the '
                       'run (its training diverged).')
    problem = None if partial_load else checkpoint_mismatch(
        model, state, checkpoint)
    if problem:
        raise HPMError(
            f'{problem}. Fix: test it with the config it was trained with (a '
            'pretraining checkpoint needs a linear probe or fine-tune '
            'first), or pass --partial-load.')
    metrics = runner.test()
    if out:
        from mmengine.fileio import dump
        dump(metrics, out)
    return metrics
