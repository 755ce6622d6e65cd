"""An HPM (or MAE) pretraining checkpoint as the backbone each downstream
codebase expects: ``mmpretrain`` (``VisionTransformer``, keys under
``backbone.``), ``mmdet`` (``ViTSAM``: no cls token, position embedding
interpolated to the detection grid), ``mmseg`` (its ``MAE``: layer scale
1), ``timm`` (a ``local-dir:`` folder). docs/transfer.md."""
import os
import re
from typing import Dict, Tuple

import torch
from mmpretrain.models.utils import resize_pos_embed

from hpm_mm.engine.checkpoint_migrations import checkpoint_state
from hpm_mm.errors import HPMError

TARGETS = ('mmpretrain', 'mmdet', 'mmseg', 'timm')
REQUIRED = ('patch_embed.projection.weight', 'pos_embed',
            'layers.0.attn.qkv.weight')

#: timm's (and the authors') block names -> mmpretrain's ({} = index)
_BLOCK = (('norm1.', 'ln1.'), ('norm2.', 'ln2.'), ('attn.', 'attn.'),
          ('mlp.fc1.', 'ffn.layers.0.0.'), ('mlp.fc2.', 'ffn.layers.1.'))
#: mmpretrain VisionTransformer key prefix <-> timm's
TIMM_NAMES = [('patch_embed.projection.', 'patch_embed.proj.'),
              ('ln1.', 'norm.')] + [(f'layers.{{}}.{b}', f'blocks.{{}}.{a}')
                                    for a, b in _BLOCK]
#: the authors' HPM / MAE names -> hpm_mm's HPM model's
OFFICIAL_NAMES = [
    ('patch_embed.proj.', 'backbone.patch_embed.projection.'),
    ('cls_token', 'backbone.cls_token'),
    ('pos_embed', 'backbone.pos_embed'),
    ('norm.', 'backbone.ln1.'),
    ('decoder_embed.', 'neck.decoder_embed.'),
    ('mask_token', 'neck.mask_token'),
    ('decoder_pos_embed', 'neck.decoder_pos_embed'),
    ('decoder_norm.', 'neck.ln1.'),
    ('decoder_pred.', 'neck.decoder_pred.'),
    ('decoder_norm_losspred.', 'neck.predictor.norm.'),
    ('decoder_pred_losspred.', 'neck.predictor.pred.'),
] + [(f'{src}.{{}}.{a}', f'{dst}.{{}}.{b}')
     for src, dst in (('blocks', 'backbone.layers'),
                      ('decoder_blocks', 'neck.decoder_blocks'),
                      ('decoder_blocks_losspred', 'neck.predictor.blocks'))
     for a, b in _BLOCK]


def rename(key: str, table, forward: bool = True):
    """``key`` through the first rule of ``table`` ((a, b) prefixes, ``{}`` a
    block index) that matches it, a -> b (``forward``) or b -> a; None when
    none matches."""
    for a, b in table:
        src, dst = (a, b) if forward else (b, a)
        pattern = '^' + re.escape(src).replace(r'\{\}', r'(\d+)')
        new, n = re.subn(pattern, dst.replace('{}', r'\1'), key)
        if n:
            return new
    return None


def saved_config(checkpoint: dict):
    """The config a checkpoint was trained with (its ``meta.cfg``), or None,
    read without importing its ``custom_imports``: converting reads names
    and sizes, none of a plugin's code, so a checkpoint of an out-of-tree
    plugin converts where the plugin is not installed."""
    import tempfile

    from mmengine.config import Config
    text = (checkpoint.get('meta') or {}).get('cfg')
    if not text:
        return None
    with tempfile.NamedTemporaryFile('w', suffix='.py') as f:
        f.write(text)
        f.flush()
        return Config.fromfile(f.name, import_custom_modules=False)


def encoder_state(checkpoint: dict,
                  teacher: bool = False,
                  name: str = 'the checkpoint') -> dict:
    """The encoder's ``VisionTransformer`` keys (no prefix) from an HPM or
    MAE pretraining checkpoint ``name`` (any target, or HPMSimMIM/HPMBEiT,
    whose ``mask_token`` is dropped); one HPMError line for anything else.
    Its state dict as every load reads it (:func:`checkpoint_state`: a DDP
    wrapper's ``module.`` taken off)."""
    state = checkpoint_state(None, checkpoint)
    prefix = 'teacher.module.backbone.' if teacher else 'backbone.'
    # mask_token: MaskTokenViT's (SimMIM/BEiT students), pretraining only
    enc = {
        k[len(prefix):]: v
        for k, v in state.items()
        if k.startswith(prefix) and k != prefix + 'mask_token'
    }
    missing = [k for k in REQUIRED if k not in enc]
    if missing and teacher:
        raise HPMError(f'{name}: this run has no EMA teacher (teacher.module.'
                       'backbone.*). Fix: drop --teacher (the student).')
    if missing:
        raise HPMError(f'{name} is not an HPM/MAE pretraining checkpoint (no '
                       f"backbone.{missing[0]}). Fix: an HPM run's .pth.")
    return enc


def convert(enc: Dict[str, torch.Tensor],
            target: str,
            grid_size: Tuple[int, int] = None) -> Dict[str, torch.Tensor]:
    """``enc`` (:func:`encoder_state`) in ``target``'s keys, the position
    embedding interpolated to ``grid_size`` (default: the pretraining grid)."""
    if target not in TARGETS:
        raise ValueError(f'target must be one of {TARGETS}, got {target!r}')
    n = enc['pos_embed'].shape[1] - 1  # (1, 1 + h*w, C): a square grid
    side = int(round(n**0.5))
    if side * side != n:
        raise ValueError(f'position embedding of {n} patches is not square')
    grid_size = tuple(grid_size or (side, side))
    pos_embed = resize_pos_embed(enc['pos_embed'], (side, side), grid_size,
                                 'bicubic', 1)  # mmpretrain's, as its ViTs
    out = dict(enc, pos_embed=pos_embed)
    if target == 'mmdet':  # ViTSAM: no cls token, the grid as (1, h, w, C)
        keep = ('layers.', 'patch_embed.')
        out = {k: v for k, v in enc.items() if k.startswith(keep)}
        out['pos_embed'] = pos_embed[:, 1:].reshape(1, *grid_size, -1)
    elif target == 'mmseg':  # its MAE: no final norm, layer scale 1
        out = {k: v for k, v in out.items() if k[:4] not in ('ln1.', 'ln2.')}
        for i in range(1 + max(
                int(k.split('.')[1]) for k in out if k.startswith('layers.'))):
            for g in ('gamma_1', 'gamma_2'):
                out[f'layers.{i}.{g}'] = torch.ones(enc['cls_token'].shape[-1])
    elif target == 'timm':
        out = {rename(k, TIMM_NAMES) or k: v for k, v in out.items()}
    else:
        out = {'backbone.' + k: v for k, v in out.items()}
    return out


def from_timm(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A timm-layout ViT (e.g. DINO's released ViT-B/16) to mmpretrain's
    :class:`VisionTransformer` keys under ``backbone.``; the classifier
    ``head.*``, if any, is dropped. The inverse of ``convert(..., 'timm')``.
    """
    return {
        'backbone.' + (rename(k, TIMM_NAMES, False) or k): v
        for k, v in state.items() if not k.startswith('head.')
    }


#: what a timm model folder needs beside timm (requirements/optional.txt)
TIMM_FOLDER_PACKAGES = ('timm', 'safetensors')
#: the files of a timm model folder, SHA256SUMS of the others last
TIMM_FILES = ('model.safetensors', 'pytorch_model.pth', 'config.json',
              'SHA256SUMS')


def timm_folder(state: Dict[str, torch.Tensor], out_dir: str, model_args: dict,
                pretrained_cfg: dict) -> Dict[str, str]:
    """Write ``state`` (timm keys) as a folder ``timm.create_model('local-dir:
    OUT_DIR', pretrained=True)`` loads, its :data:`TIMM_FILES` as a set
    (:func:`hpm_mm.engine.work_dir.write_outputs`; ``config.json`` carries
    hpm_mm's mark), each file's bytes made first (SHA256SUMS sums them).
    Returns file name -> SHA-256."""
    import hashlib
    import io
    import json
    from pathlib import Path

    from safetensors.torch import save

    from hpm_mm.engine.work_dir import MARK, write_outputs
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    config = {
        MARK: 'hpm2backbone.py',
        'architecture': 'vit_base_patch16_224',  # its builder, our args
        'num_classes': 0,
        'num_features': model_args['embed_dim'],
        'model_args': model_args,
        'pretrained_cfg': pretrained_cfg
    }
    weights, torch_weights, config_json, sums_file = TIMM_FILES
    pth = io.BytesIO()
    torch.save(tensors, pth)
    data = {
        weights: save(tensors, metadata=dict(format='pt')),
        torch_weights: pth.getvalue(),
        config_json: json.dumps(config, indent=2).encode()
    }
    sums = {n: hashlib.sha256(b).hexdigest() for n, b in data.items()}
    data[sums_file] = ''.join(f'{h}  {n}\n' for n, h in sums.items()).encode()
    write_outputs({
        os.path.join(out_dir, n):
        lambda part, b=b: Path(part).write_bytes(b)
        for n, b in data.items()
    })
    return sums
