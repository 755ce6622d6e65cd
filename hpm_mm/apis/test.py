"""Evaluating a checkpoint with a config's test loop, from Python."""
import os
import os.path as osp
from typing import Optional, Union

from mmengine.config import Config

from hpm_mm.errors import HPMError
from .config import run_config


def check_out(path: str) -> None:
    """Refuse an ``out`` file that could not be written, by opening it,
    before the evaluation (mmengine's dump fails only after it)."""
    ext = osp.splitext(path)[1].lower()
    if ext not in ('.json', '.yaml', '.yml', '.pkl', '.pickle'):
        raise HPMError(f'--out {path}: unknown format {ext or "(none)"}. '
                       'Fix: end it in .json, .yaml or .pkl.')
    existed = osp.exists(path)
    try:
        with open(path, 'a'):
            pass
    except OSError as e:
        raise HPMError(f'--out {path} cannot be written ({e.strerror or e}).'
                       ' Fix: write it into a folder you can write.') from None
    if not existed:
        os.remove(path)


def test(config: Union[str, Config],
         checkpoint: str,
         work_dir: Optional[str] = None,
         *,
         out: Optional[str] = None,
         partial_load: bool = False,
         launcher: str = 'none',
         cfg_options: Optional[dict] = None) -> dict:
    """The metrics of ``checkpoint`` on the config's test loop
    (``tools/test.py``). The checkpoint must fill the model (else refused
    unless ``partial_load``) and hold no NaN/inf; ``out`` (.json/.yaml/.pkl) is
    checked before the evaluation. The runner is built without training parts
    (no lock, no resume checks).

    Raises:
        HPMError: A checkpoint or ``out`` that cannot work, in one line."""
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
            'tools/analysis_tools/knn_eval.py CONFIG CHECKPOINT, or test a '
            'fine-tuned benchmark config (configs/benchmarks/).')
    cfg.load_from = checkpoint
    from mmpretrain.utils import get_ori_model

    from hpm_mm.engine.dist import setup_cpu_distributed
    from hpm_mm.engine.resume import checkpoint_mismatch
    from hpm_mm.engine.safe_load import check_finite, checkpoint_state
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
    problem = None if partial_load else checkpoint_mismatch(
        model, state, checkpoint)
    if problem:
        raise HPMError(
            f'{problem}. Fix: the config it was trained with (fine-tune a '
            'pretraining checkpoint first), or --partial-load.')
    metrics = runner.test()
    if out:
        from mmengine.fileio import dump
        dump(metrics, out)
    return metrics
