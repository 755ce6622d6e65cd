"""An image folder's few numbers, set once in a config's ``image`` key::

    image = dict(root='path/to/images', size=32, channels=3, patch_size=4,
                 mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4])

and applied to every part that depends on them: the encoder, decoder and
head, the data preprocessor (0..255 units, colour order) and every
loader's root, colour and transform sizes (docs/own_data.md)."""
import math

from hpm_mm.errors import HPMError, no_such_key
from .data_check import _loaders
from .image_folder import reads_image_files

#: transform -> the key that takes the image size
SIZE_KEYS = dict(
    RandomResizedCrop='scale',
    LoadAndRandomResizedCrop='scale',
    LoadBytesAndCropBox='scale',
    ResizeEdge='scale',
    Resize='scale',
    CenterCrop='crop_size',
    RandomCrop='crop_size')

#: the keys of the ``image`` spec
SPEC_KEYS = ('root', 'size', 'channels', 'patch_size', 'mean', 'std')


def _check(spec: dict) -> tuple:
    """Refuse a spec that cannot train; its (size, channels, patch_size)."""
    unknown = [k for k in spec if k not in SPEC_KEYS]
    if unknown:  # the config room's line for a key nothing takes
        raise HPMError(
            no_such_key(unknown[0], 'the image spec', SPEC_KEYS, 'image'))
    missing = [k for k in SPEC_KEYS[1:] if spec.get(k) is None]
    if missing:
        raise HPMError(f'image: {missing} not set. Fix: set them '
                       '(docs/own_data.md).')
    size, ch, patch = spec['size'], spec['channels'], spec['patch_size']
    if ch not in (1, 3):
        raise HPMError(f'image.channels={ch}: 1 (grayscale) or 3 (RGB).')
    for key in ('mean', 'std'):  # one number: every channel's
        if isinstance(spec[key], (int, float)) and type(spec[key]) is not bool:
            spec[key] = [spec[key]] * ch
    for key in ('size', 'patch_size'):
        if type(spec[key]) is not int or spec[key] < 1:  # (not a bool)
            raise HPMError(f'image.{key}={spec[key]!r}: give a positive '
                           'whole number of pixels.')
    mean, std = list(spec['mean']), list(spec['std'])
    if not all(
            isinstance(v, (int, float)) and math.isfinite(v)
            for v in mean + std):
        raise HPMError(f'image.mean / std {mean} / {std}: not finite.')
    if any(s <= 0 for s in std):
        raise HPMError(f'image.std={std}: every std must be > 0. Fix: the '
                       "images' std per channel, in 0..255 units.")
    # per channel: a std <= 1, or a mean in (0, 1], is in 0..1 units (a
    # mean of 0 with a std of 255 is a valid 0..1 scaling of 0..255)
    small = [
        i for i, (m, sd) in enumerate(zip(mean, std)) if sd <= 1 or 0 < m <= 1
    ]
    if small:
        raise HPMError(f'image.mean / std channel(s) {small} look like 0..1 '
                       'units. Fix: 0..255 units (times 255).')
    if size % patch:
        raise HPMError(
            f'image.size={size} is not a multiple of image.patch_'
            f'size={patch}. Fix: size={size - size % patch or patch}.')
    if (size // patch)**2 < 4:
        raise HPMError(
            f'image.size={size} / patch_size={patch}: {(size // patch)**2} '
            f'patch(es). Fix: image.patch_size <= {max(size // 2, 1)}.')
    if len(mean) != ch or len(std) != ch:
        raise HPMError(f'image.mean / std {mean} / {std}: need {ch} values '
                       '(one per channel).')
    return size, ch, patch


def apply_image_spec(cfg):
    """Apply ``cfg.image`` (see the module) to ``cfg`` in place and return it;
    a spec that cannot work is one HPMError line."""
    spec = cfg.get('image')
    if not spec:
        return cfg
    size, ch, patch = _check(spec)
    model = cfg.get('model') or {}
    backbone = model.get('backbone')
    if isinstance(backbone, dict):
        backbone.update(img_size=size, patch_size=patch)
        backbone['patch_cfg'] = dict(
            backbone.get('patch_cfg') or {}, in_channels=ch)
    takes = dict(
        neck=dict(
            num_patches=(size // patch)**2, patch_size=patch, in_chans=ch),
        head=dict(patch_size=patch, in_channels=ch))
    for part, keys in takes.items():  # each key where the part has it
        module = model.get(part)
        if isinstance(module, dict):
            module.update({k: v for k, v in keys.items() if k in module})
    for holder in (cfg, model):
        pre = holder.get('data_preprocessor')
        if isinstance(pre, dict):
            pre.update(
                mean=list(spec['mean']), std=list(spec['std']), to_rgb=ch == 3)
    # the root replaces the training images' folder wherever a loader reads
    # it, and fills a loader that names none; a loader of another folder
    # (a held-out validation folder) keeps it: the kNN would otherwise
    # score the training images against themselves
    train_root = ((cfg.get('train_dataloader') or {}).get('dataset')
                  or {}).get('data_root')
    for _, loader in _loaders(cfg):
        dataset = loader.get('dataset') or {}
        if spec.get('root') is not None and dataset.get('data_root') in (
                None, '', train_root) and 'dataset' not in dataset \
                and 'datasets' not in dataset:
            dataset['data_root'] = spec['root']
        for t in dataset.get('pipeline') or []:
            kind = str(t.get('type', '')).split('.')[-1]
            if reads_image_files(t):
                t['color_type'] = 'grayscale' if ch == 1 else 'color'
            if kind in SIZE_KEYS:
                t[SIZE_KEYS[kind]] = size
    return cfg
