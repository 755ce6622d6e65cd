"""hpm_mm from Python (as :mod:`mmpretrain.apis`): train, test, pretrain
on a folder of images, evaluate with kNN, draw the hard patches, load a trained
encoder. Each raises :class:`~hpm_mm.errors.HPMError` with one line that
names the problem and the fix; the tools turn it into an exit code."""
from hpm_mm.engine.config_check import load_config, merge_cfg_options
from hpm_mm.errors import HPMError
from .config import CfgOptionsAction
from .folder import pretrain_folder
from .knn import frozen_eval, knn_eval
from .model import load_model
from .official import import_official
from .pictures import hard_patches
from .test import test
from .train import build_runner, train, train_config

__all__ = [
    'HPMError', 'train', 'train_config', 'build_runner', 'test',
    'pretrain_folder', 'knn_eval', 'frozen_eval', 'hard_patches', 'load_model',
    'load_config', 'merge_cfg_options', 'CfgOptionsAction', 'import_official'
]
