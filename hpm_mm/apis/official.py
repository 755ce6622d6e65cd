"""The authors' released HPM checkpoints (Haochen-Wang409/HPM) and MAE's
official ones (facebookresearch/mae) as ordinary hpm_mm HPM checkpoints.

Their files hold ``{'model': state_dict[, 'optimizer', 'epoch', 'scaler',
'args']}`` in timm's ViT names: the encoder (``patch_embed.proj``,
``cls_token``, ``pos_embed``, ``blocks.i``, ``norm``), the shared decoder
embedding (``decoder_embed``, ``mask_token``, ``decoder_pos_embed``), the
reconstructor (``decoder_blocks.i``, ``decoder_norm``, ``decoder_pred``) and
HPM's loss predictor (``decoder_blocks_losspred.i``,
``decoder_norm_losspred``, ``decoder_pred_losspred``). MAE's
``mae_pretrain_vit_*`` files hold the encoder only, its ``mae_visualize_*``
add the reconstructor. docs/transfer.md#start-from-the-authors-weights.
"""
import logging
import os.path as osp
from typing import Optional, Tuple

import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS

from hpm_mm.engine.safe_load import check_fills, check_finite, load_file
from hpm_mm.engine.work_dir import (MARK, plan_outputs, text_writer,
                                    write_outputs)
from hpm_mm.errors import HPMError
from .config import load_config
from .convert import OFFICIAL_NAMES, rename
from .model import file_names

#: ViT widths -> heads of the standard sizes (the heads are not in the
#: tensors)
VIT_SIZES = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}
#: the repository config each standard encoder continues from
BASE_CONFIGS = {
    (768, 12, 16, 224): 'hpm/hpm_vit-base-p16_8xb512-amp-coslr-800e_in1k.py',
    (1024, 24, 16, 224): 'hpm/hpm_vit-large-p16_8xb512-amp-coslr-800e_in1k.py'
}
#: entries of an EMA copy of ``model`` that some training scripts save
EMA_KEYS = ('model_ema', 'ema_state_dict', 'ema')
#: key prefixes of wrappers around a model: DDP's (and timm's EMA), compile's
WRAPPERS = ('module.', '_orig_mod.')
_DECODER = ('neck.decoder_embed.', 'neck.mask_token', 'neck.decoder_pos_embed',
            'neck.decoder_blocks.', 'neck.ln1.', 'neck.decoder_pred.')
#: each layout: what it holds, and the parts it lacks by design (fresh)
LAYOUTS = {
    'hpm': ("the authors' HPM (encoder, reconstructor, loss predictor)", ()),
    'mae_visualize': ("MAE's (encoder, reconstructor)", ('neck.predictor.', )),
    'mae_pretrain': ("MAE's (encoder only)", _DECODER + ('neck.predictor.', )),
}
#: the seed of the fresh parts: two imports of one file are equal
SEED = 0
OFFICIAL_FILE = "the authors' HPM or MAE's pretraining file (timm names)"


def _count(state: dict, prefix: str) -> int:
    idx = [int(k.split('.')[1]) for k in state if k.startswith(prefix + '.')]
    return 1 + max(idx) if idx else 0


def _refuse(src: str, found: str, fix: str = OFFICIAL_FILE) -> HPMError:
    return HPMError(f'{src}: {found}. Fix: {fix}.')


def official_state(ckpt, src: str = 'the checkpoint') -> dict:
    """The model state dict of an official file: its ``model`` entry (or
    ``module`` / ``state_dict``, or the file itself), refused in one line
    when it is no MAE-style ViT in timm's names or lacks a tensor
    :func:`read_arch` reads."""
    if not isinstance(ckpt, dict):
        raise _refuse(src, f'it holds a {type(ckpt).__name__}')
    state = next((ckpt[k] for k in ('model', 'module', 'state_dict')
                  if isinstance(ckpt.get(k), dict)), ckpt)
    for wrapper in WRAPPERS:  # DDP's module.xxx, ...: unwrapped
        if state and all(k.startswith(wrapper) for k in state):
            state = {k[len(wrapper):]: v for k, v in state.items()}
    if any(k.startswith(('backbone.', 'teacher.')) for k in state):
        raise _refuse(src, 'it is an hpm_mm (mmengine) checkpoint already',
                      'use it as it is')
    if 'head.weight' in state or any(k.startswith('fc_norm.') for k in state):
        raise _refuse(src, 'it is a fine-tuned classifier (head / fc_norm)')
    other = [k for k in state if rename(k, OFFICIAL_NAMES) is None]
    if other:
        raise _refuse(src,
                      f'it holds keys no MAE/HPM ViT has, e.g. {other[:3]}')
    need = ('patch_embed.proj.weight', 'pos_embed', 'blocks.0.mlp.fc1.weight')
    missing = [k for k in need if k not in state]  # (the rest: check_fills)
    if missing:
        raise _refuse(src, f'it lacks {missing}')
    return state


def read_arch(state: dict,
              args=None,
              num_heads: Optional[int] = None,
              decoder_num_heads: Optional[int] = None,
              src: str = 'the checkpoint') -> Tuple[str, dict]:
    """(layout, the HPM model's sizes as config overrides) from the
    tensors' shapes; the heads (no shape holds them) from ``num_heads``,
    else the standard ViT of that width (:data:`VIT_SIZES`); ``norm_pix``
    from ``args.norm_pix_loss``, else the recipe of the layout (the authors
    train without it, MAE with). Shapes that fit no ViT are the import's
    :func:`check_fills` refusal."""
    proj, pos = state['patch_embed.proj.weight'], state['pos_embed']
    dim, in_ch, patch = proj.shape[0], proj.shape[1], proj.shape[-1]
    side = max(2, round((pos.shape[1] - 1)**.5))  # (others: check_fills)
    layout = 'hpm' if any('losspred' in k for k in state) else \
        'mae_visualize' if any(k.startswith(('decoder', 'mask_token'))
                               for k in state) else 'mae_pretrain'
    if num_heads is None and dim not in VIT_SIZES:
        raise HPMError(f'{src}: a {dim}-d encoder is no standard ViT width'
                       f' {sorted(VIT_SIZES)}. Fix: --num-heads N.')
    dec = state.get('decoder_embed.weight')
    dec_dim = 512 if dec is None else dec.shape[0]
    if decoder_num_heads is None and dec_dim != 512:
        raise HPMError(f'{src}: a {dec_dim}-d decoder (the releases: 512-d)'
                       '. Fix: --decoder-num-heads N.')
    num_heads = VIT_SIZES[dim] if num_heads is None else num_heads
    decoder_num_heads = decoder_num_heads or 16
    for flag, width, heads in (('--num-heads', dim, num_heads),
                               ('--decoder-num-heads', dec_dim,
                                decoder_num_heads)):
        if heads < 1 or width % heads:
            raise HPMError(
                f'{src}: {flag} {heads} does not divide the {width}-d width '
                f'into heads. Fix: {flag} N with N dividing {width}.')
    dec_depth = _count(state, 'decoder_blocks') or 8
    fc1 = state.get('decoder_blocks.0.mlp.fc1.weight')
    norm_pix = getattr(args, 'norm_pix_loss', layout != 'hpm')
    vit = dict(
        embed_dims=dim,
        num_layers=_count(state, 'blocks'),
        num_heads=num_heads,
        feedforward_channels=state['blocks.0.mlp.fc1.weight'].shape[0])
    model = dict(
        backbone=dict(
            arch=dict(vit, _delete_=True),  # (the base names its arch 'b')
            img_size=side * patch,
            patch_size=patch,
            patch_cfg=dict(in_channels=in_ch)),
        neck=dict(
            num_patches=side * side,
            patch_size=patch,
            in_chans=in_ch,
            embed_dim=dim,
            decoder_embed_dim=dec_dim,
            decoder_depth=dec_depth,
            decoder_num_heads=decoder_num_heads,
            mlp_ratio=4 if fc1 is None else fc1.shape[0] // dec_dim,
            predictor_depth=_count(state, 'decoder_blocks_losspred')
            or dec_depth),
        head=dict(
            patch_size=patch, in_channels=in_ch, norm_pix=bool(norm_pix)))
    return layout, model


def official_config(layout: str, model: dict) -> Tuple[str, Config]:
    """The HPM config of ``model`` (:func:`read_arch`'s) as its text and as
    a config: the repository's 800-epoch ImageNet config of that encoder
    (ViT-B/16 or ViT-L/16 at 224 px; else ViT-B/16's) with those sizes."""
    vit, bb = model['backbone']['arch'], model['backbone']
    key = (vit['embed_dims'], vit['num_layers'], bb['patch_size'],
           bb['img_size'])
    values = dict(model=model)
    channels = bb['patch_cfg']['in_channels']
    if channels == 1:  # a grayscale encoder: the mean of ImageNet's three
        values['image'] = dict(
            size=bb['img_size'],
            channels=1,
            patch_size=bb['patch_size'],
            mean=[114.495],  # (123.675 + 116.28 + 103.53) / 3
            std=[57.63])  # (58.395 + 57.12 + 57.375) / 3
    elif channels != 3:
        raise HPMError(f'a {channels}-channel encoder: hpm_mm reads 1 or 3'
                       ' channels. Fix: an RGB or a grayscale model.')
    text = (
        f'# {MARK}: {LAYOUTS[layout][0]} weights imported by tools/model_'
        'converters/official2hpm.py: the sizes read from the file\n_base_ = '
        f"'hpm_mm::{BASE_CONFIGS.get(key, BASE_CONFIGS[(768, 12, 16, 224)])}'"
        '\n' + Config(values).pretty_text)
    return text, load_config(Config.fromstring(text, '.py'))


def _same(a: dict, b: dict) -> bool:
    """Whether two state dicts hold the same values (tensors: of one shape)."""
    return a.keys() == b.keys() and all(
        torch.equal(v, b[k]) if torch.is_tensor(v) and torch.is_tensor(b[k])
        else type(v) is type(b[k]) and v == b[k] for k, v in a.items())


def _accounted(state: dict, expected: dict, who: str, fix: str) -> dict:
    """``state`` (the authors' names) in the model's names, refused in one
    line naming the file's keys (the one strict-load rule,
    :func:`~hpm_mm.engine.safe_load.check_fills`) unless it holds every
    tensor of ``expected`` (in the authors' names), each of its shape, and
    nothing else."""
    check_finite(state, who)
    check_fills(expected, state, who, fix, exact=True)
    return {rename(k, OFFICIAL_NAMES): v for k, v in state.items()}


def import_official(src: str,
                    out: str,
                    num_heads: Optional[int] = None,
                    decoder_num_heads: Optional[int] = None,
                    ema: bool = True) -> dict:
    """Write the official checkpoint ``src`` as an hpm_mm HPM checkpoint
    ``out`` and its config (``out``'s ``.py``), a set: student = the file's
    ``model``, teacher = its EMA entry where it has one (:data:`EMA_KEYS`;
    not ``ema``: the same weights); no optimizer state. Each holds every
    tensor of the model but the parts its layout lacks (:data:`LAYOUTS`:
    MAE's loss predictor, an encoder-only file's decoder), which start
    from :data:`SEED`, named in ``meta.imported.untrained``. Returns what
    was imported.

    Raises:
        HPMError: ``src`` is not such a file, or ``out`` not writable (one
        line; nothing written)."""
    config_path = osp.splitext(out)[0] + '.py'
    plan_outputs([out, config_path],
                 'the imported checkpoint', [src],
                 fix='another OUT.pth (its config goes beside it, OUT.py)')
    ckpt = load_file(src)
    state = official_state(ckpt, src)
    layout, sizes = read_arch(state, ckpt.get('args'), num_heads,
                              decoder_num_heads, src)
    text, cfg = official_config(layout, sizes)
    with torch.random.fork_rng(devices=[]):  # the fresh parts: seeded
        torch.manual_seed(SEED)
        logging.disable(logging.INFO)  # mmengine's line per tensor
        try:
            model = MODELS.build(cfg.model)
            model.init_weights()
        finally:
            logging.disable(logging.NOTSET)
    fresh = LAYOUTS[layout][1]  # the student's other tensors: each read
    expected = {
        rename(k, OFFICIAL_NAMES, False): v
        for k, v in model.state_dict().items()
        if not k.startswith(('teacher.', ) + fresh)
    }
    model.load_state_dict(
        _accounted(state, expected, src,
                   'the file as released (download it again)'),
        strict=False)
    model.teacher.update_parameters(model.student())  # the first: a copy
    entries = [k for k in EMA_KEYS if ema and isinstance(ckpt.get(k), dict)]
    entry = next(iter(entries), None)
    if any(not _same(ckpt[entry], ckpt[k]) for k in entries[1:]):
        raise HPMError(f'{src} holds {len(entries)} EMA entries that differ '
                       f'({", ".join(entries)}). Fix: --no-ema.')
    if entry is not None:  # the student's parts, in the teacher's names
        who = f'{src}: its EMA entry {entry!r}'
        teacher = _accounted(
            official_state(ckpt[entry], who), expected, who,
            '--no-ema (teacher = the released weights)')
        names = file_names(model, teacher, teacher=True)  # (k: not one)
        teacher = {names[k]: v for k, v in teacher.items() if names[k] != k}
        model.load_state_dict(teacher, strict=False)
    vit, bb = sizes['backbone']['arch'], sizes['backbone']
    imported = dict(
        source=osp.abspath(src),
        layout=layout,
        teacher='ema' if entry is not None else 'student',
        epoch=ckpt.get('epoch'),
        untrained=list(fresh),
        message=(f'{src}: {LAYOUTS[layout][0]} ViT {vit["embed_dims"]}-d x '
                 f'{vit["num_layers"]} blocks, patch {bb["patch_size"]}, '
                 f'{bb["img_size"]} px; every tensor read; teacher = the ' +
                 (f'EMA weights ({entry!r})' if entry is not None else
                  'same weights' + ('' if ema else ' (--no-ema)')) +
                 (f'; untrained (freshly initialised, seed {SEED}): '
                  f'{", ".join(fresh)}' if fresh else '')))
    write_outputs({
        config_path: text_writer(text),
        out: lambda part: torch.save(
            dict(state_dict=model.state_dict(),
                 meta={'cfg': cfg.pretty_text, 'imported': imported,
                       MARK: 'official2hpm.py'}), part)})  # yapf: disable
    return dict(imported, out=out, config=config_path)
