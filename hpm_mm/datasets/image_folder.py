"""A folder of your own images, read and scanned (:func:`scan_folder`: every
image, the unreadable ones named, labelled or not); the run is made of it
in :mod:`hpm_mm.apis.folder`."""
import os
import os.path as osp
import random
from typing import Dict, List, Optional

import numpy as np
from PIL import Image

from hpm_mm.errors import HPMError

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff')
GRAY_MODES = ('1', 'L', 'LA')

#: PIL modes of more than 8 bits per channel: the training pipeline reads
#: files through OpenCV, which would scale or refuse them differently from
#: what the scan measured (mean 255 / std 1 for 16-bit PNGs)
DEEP_MODES = ('I', 'I;16', 'I;16B', 'I;16L', 'I;16N', 'F', 'RGB;16', 'RGBA;16')


def load_image(path: str,
               color_type: str = 'color',
               backend_args: Optional[dict] = None):
    """hpm_mm's one image reader (training, the data checks, the own-folder
    scan): mmcv's pillow decoder, after the header is read for what the
    pipeline cannot use. Returns (array, PIL mode).

    Raises:
        ValueError: Undecodable, empty, or more than 8 bits per channel."""
    import io

    import mmcv
    from mmengine import fileio
    try:
        content = fileio.get(path, backend_args=backend_args)
        with Image.open(io.BytesIO(content)) as img:
            size, mode = img.size, img.mode
    except Exception as e:  # PIL raises many types for bad files
        raise ValueError(f'{type(e).__name__}: {e}') from None
    check_header(size, mode)
    try:  # the full decode: a truncated file fails here
        array = mmcv.imfrombytes(content, flag=color_type, backend='pillow')
    except Exception as e:
        raise ValueError(f'{type(e).__name__}: {e}') from None
    if array is None:
        raise ValueError('not decodable')
    return array, mode


def check_header(size, mode: str) -> None:
    """Refuse, from its header, an image the pipeline cannot train on:
    empty, or more than 8 bits per channel (with the fix by its range)."""
    if min(size) < 1:
        raise ValueError(f'empty image {size}')
    if mode in DEEP_MODES:
        # the fix by range: 16-bit integers span 0..65535, float images
        # often 0..1 (dividing those by 256 would make them black)
        fix = "img.point(lambda v: v / 256).convert('L')" if mode[0] == 'I' \
            else "(np.asarray(img) * 255).clip(0, 255).astype('uint8')"
        raise ValueError(
            f'{mode} pixels (16-bit or float). Fix: convert to 8 bits: {fix}')


def reads_image_files(transform: dict) -> bool:
    """Whether a pipeline step reads the image files (and so takes
    ``color_type``): mmcv's/mmpretrain's ``LoadImage*`` loaders,
    :class:`LoadImageFromFileChecked`, :class:`LoadAndRandomResizedCrop`."""
    kind = str(transform.get('type', '')).split('.')[-1]
    return kind.startswith('LoadImage') or kind == 'LoadAndRandomResizedCrop'


def check_folder(root: str) -> None:
    """Refuse, in one line, a ``root`` that is not a folder."""
    if not osp.isdir(root):
        raise HPMError(f'{root} is not a folder. Fix: pass the folder that '
                       'holds your images.')


def scan_folder(root: str) -> Dict:
    """Every image file under ``root``, opened: ``files`` (readable, relative,
    sorted), ``unreadable`` ((path, reason)), ``sizes``, ``gray`` and
    ``classes`` (when labelled). Raises HPMError without images."""
    check_folder(root)
    seen = {osp.realpath(root)}

    def is_data(folder: str, name: str) -> bool:
        """Not hidden, nor a tool's work dir (checkpoints, hard-patch
        grids), nor met before (a symlink loop, a second link)."""
        full = osp.join(folder, name)
        real = osp.realpath(full)
        if name.startswith('.') or name == 'work_dirs' or real in seen or any(
                osp.exists(osp.join(full, f))
                for f in ('.run.lock', 'last_checkpoint')):
            return False
        seen.add(real)
        return True

    paths = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = [d for d in sorted(dirnames) if is_data(dirpath, d)]
        paths += [
            osp.relpath(osp.join(dirpath, f), root) for f in sorted(filenames)
            if f.lower().endswith(IMAGE_EXTENSIONS) and is_data(dirpath, f)
        ]
    if not paths:
        raise HPMError(
            f'{root} holds no image file ({", ".join(IMAGE_EXTENSIONS)}'
            '). Fix: the folder of your images.')
    files, sizes, unreadable, gray = [], [], [], True
    for rel in paths:
        try:
            # the image lists hold one name per line: training would skip
            if '\n' in rel or '\r' in rel:
                raise ValueError('its name holds a line break; rename it')
            array, mode = load_image(osp.join(root, rel), 'unchanged')
        except ValueError as e:
            unreadable.append(
                (rel.replace('\n', '\\n').replace('\r', '\\r'), str(e)))
            continue
        files.append(rel)
        sizes.append((array.shape[1], array.shape[0]))
        gray = gray and mode in GRAY_MODES
    tops = {f.split(os.sep)[0] for f in files}
    labelled = bool(files) and all(os.sep in f for f in files) and \
        len(tops) >= 2
    return dict(
        files=files,
        unreadable=unreadable,
        sizes=sizes,
        gray=gray,
        classes=sorted(tops) if labelled else None)


def channel_stats(root: str,
                  files: List[str],
                  size: int,
                  channels: int,
                  max_images: int = 500,
                  seed: int = 0) -> Dict:
    """Per-channel mean and std (0..255) of up to ``max_images`` images
    resized to ``size``, for the data preprocessor."""
    rng = random.Random(seed)
    pick = files if len(files) <= max_images else rng.sample(files, max_images)
    values = []
    for rel in pick:
        array, _ = load_image(
            osp.join(root, rel), 'grayscale' if channels == 1 else 'color')
        if channels == 3:
            array = array[..., ::-1]  # the preprocessor's RGB (to_rgb)
        img = Image.fromarray(np.ascontiguousarray(array)).resize(
            (size, size), Image.BICUBIC)
        values.append(np.asarray(img, np.float64).reshape(-1, channels))
    values = np.concatenate(values)
    if float(values.std(0).max()) < 1.0:
        raise HPMError(f'the images of {root} are one constant value. Fix: '
                       'the folder of your real images.')
    std = np.maximum(values.std(0), 1.0)  # a near-constant channel
    return dict(
        mean=[round(float(v), 2) for v in values.mean(0)],
        std=[round(float(v), 2) for v in std])


def split_labelled(files: List[str],
                   classes: List[str],
                   val_fraction: float = 0.2,
                   seed: int = 0):
    """Deterministic per-class split into (memory bank, evaluated) lists of
    ``(path, label)``: ``val_fraction`` of each class (at least one image
    when the class has two or more) is evaluated, the rest is the kNN
    memory bank."""
    rng = random.Random(seed)
    by_class = {}
    for f in files:
        by_class.setdefault(f.split(os.sep)[0], []).append(f)
    bank, val = [], []
    for label, c in enumerate(classes):
        items = sorted(by_class.get(c, []))
        rng.shuffle(items)
        k = max(1, round(len(items) * val_fraction)) if len(items) > 1 \
            else 0
        val += [(f, label) for f in items[:k]]
        bank += [(f, label) for f in items[k:]]
    return bank, val
