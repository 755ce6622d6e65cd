"""Pre-flight check of a config's image files (``tools/misc/check_data.py``,
``tools/train.py --check-data``)."""
import os
import os.path as osp
from collections import Counter
from typing import Dict, List, Optional, Tuple

from mmengine.config import Config

from hpm_mm.errors import HPMError
from .fashion_mnist import resolve_data_root
from .image_folder import load_image, reads_image_files


def _loaders(cfg: Config) -> List[Tuple[str, dict]]:
    """(name, dataloader config) of every dataset the config reads."""
    out = [(key, cfg[key])
           for key in ('train_dataloader', 'val_dataloader', 'test_dataloader')
           if cfg.get(key)]
    for hook in cfg.get('custom_hooks', []) or []:
        for key, value in hook.items():
            if key.endswith('dataloader') and isinstance(value, dict):
                out.append((f"{hook['type']}.{key}", value))
    return out


#: a loader's color_type -> the channels it reads ('unchanged': not known)
CHANNELS = dict(grayscale=1, color=3)


def check_data(cfg: Config, max_images: int = 0) -> Dict[str, list]:
    """Open every image file the datasets of ``cfg`` (a config
    :func:`~hpm_mm.engine.config_check.load_config` made: its scope set)
    list.

    Returns:
        dict: ``problems`` (one line each: unreadable files, channel
        mismatches) and ``report`` (one line per dataset).
    """
    from mmpretrain.registry import DATASETS
    problems, report, seen = [], [], set()
    backbone = cfg.get('model', {}).get('backbone', {}) or {}
    patch_cfg = backbone.get('patch_cfg') or {}
    want = patch_cfg.get('in_channels', backbone.get('in_channels', 3))
    for name, loader in _loaders(cfg):
        ds_cfg = loader['dataset']
        if repr(ds_cfg) in seen:  # the same dataset in two loaders: once
            continue
        seen.add(repr(ds_cfg))
        try:
            dataset = DATASETS.build(ds_cfg)
        except Exception as e:  # missing folders, bad annotation files
            problems.append(f'{name}: cannot build the dataset: {e}')
            continue
        loads = next(
            (CHANNELS.get(t.get('color_type', 'color'), 0)
             for t in ds_cfg.get('pipeline') or [] if reads_image_files(t)), 0)
        if loads and want and loads != want:
            problems.append(
                f'{name}: the pipeline loads {loads}-channel images but the '
                f'model takes {want}: set LoadImageFromFile color_type='
                f"'{'grayscale' if want == 1 else 'color'}'")
        n = len(dataset) if not max_images else min(len(dataset), max_images)
        modes, bad = Counter(), 0
        for i in range(n):
            path = dataset.get_data_info(i).get('img_path')
            if path is None:
                continue
            try:
                _, mode = load_image(path, 'unchanged')
                modes[mode] += 1
            except ValueError as e:
                bad += 1
                problems.append(f'{name}: unreadable image {path} ({e})')
        files = sum(modes.values()) + bad
        kinds = ', '.join(f'{k}: {v}' for k, v in sorted(modes.items()))
        report.append(f'{name}: {len(dataset)} samples; ' + (
            f'{files} image files checked, {bad} unreadable ({kinds})'
            if files else 'in memory, no image files to check'))
    return dict(problems=problems, report=report)


def check_data_roots(cfg, work_dir: Optional[str] = None) -> None:
    """Refuse, before anything is written, a training or hook loader's
    ``data_root`` that does not exist, and a work dir inside the folder a
    ``CustomDataset`` scans for its training images."""
    for name, loader in _loaders(cfg):
        if name in ('val_dataloader', 'test_dataloader'):
            continue
        dataset = loader.get('dataset') if isinstance(loader, dict) else None
        root = (dataset or {}).get('data_root')
        if not isinstance(root, str) or not root or '://' in root:
            continue
        kind = str(dataset.get('type', '')).split('.')[-1]
        found = resolve_data_root(root) if 'MNIST' in kind else root
        if not osp.isdir(found):
            raise HPMError(
                f'{name}.dataset.data_root {root!r} is not a folder'
                f' (from {os.getcwd()}). Fix: your images\' folder.')
        scans = kind == 'CustomDataset' and not dataset.get('ann_file')
        real = osp.realpath(found)
        if name == 'train_dataloader' and work_dir and scans and \
                osp.commonpath([osp.realpath(work_dir), real]) == real:
            raise HPMError(
                f'the work dir {work_dir} is inside the training '
                f"images' folder {root}. Fix: --work-dir outside it.")
