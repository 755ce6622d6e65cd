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
import os
import os.path as osp
import re
from typing import Optional

import torch
from mmengine.config import Config

from hpm_mm.errors import HPMError

#: the authors' names (``{}``: a block index) -> hpm_mm's HPM model's
_BLOCK = (('norm1.', 'ln1.'), ('norm2.', 'ln2.'), ('attn.', 'attn.'),
          ('mlp.fc1.', 'ffn.layers.0.0.'), ('mlp.fc2.', 'ffn.layers.1.'))
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
#: ViT widths -> (name, heads) of the standard sizes (the heads are not in
#: the tensors); the authors' ``args.model`` names the size too
VIT_SIZES = {
    192: ('tiny', 3),
    384: ('small', 6),
    768: ('base', 12),
    1024: ('large', 16),
    1280: ('huge', 16)
}
#: the repository config each standard encoder continues from
BASE_CONFIGS = {
    (768, 12, 16, 224): 'hpm/hpm_vit-base-p16_8xb512-amp-coslr-800e_in1k.py',
    (1024, 24, 16, 224): 'hpm/hpm_vit-large-p16_8xb512-amp-coslr-800e_in1k.py'
}
#: entries of an EMA copy of ``model`` that some training scripts save
EMA_KEYS = ('model_ema', 'ema_state_dict', 'ema')
LAYOUTS = {
    'hpm': "the authors' HPM (encoder, reconstructor, loss predictor)",
    'mae_visualize': "MAE's (encoder, reconstructor)",
    'mae_pretrain': "MAE's (encoder only)",
}


def rename(key: str, table=OFFICIAL_NAMES, forward: bool = True):
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


def _count(state: dict, prefix: str) -> int:
    idx = [int(k.split('.')[1]) for k in state if k.startswith(prefix + '.')]
    return 1 + max(idx) if idx else 0


def _refuse(src: str, found: str, expected: str) -> HPMError:
    return HPMError(f'{src}: {found}; expected {expected}. Nothing written.')


def official_state(ckpt, src: str = 'the checkpoint') -> dict:
    """The model state dict of an official file: its ``model`` entry (or
    ``module`` / ``state_dict``, or the file itself), refused in one line
    when it is no MAE-style ViT in timm's names."""
    if not isinstance(ckpt, dict):
        raise _refuse(src, f'it holds a {type(ckpt).__name__}',
                      "a dict with a 'model' state dict")
    state = next((ckpt[k] for k in ('model', 'module', 'state_dict')
                  if isinstance(ckpt.get(k), dict)), ckpt)
    expected = ("the authors' HPM or MAE's pretraining layout (timm names: "
                'patch_embed.proj, cls_token, pos_embed, blocks.N, norm)')
    if any(k.startswith(('backbone.', 'teacher.')) for k in state):
        raise _refuse(src, 'it is an hpm_mm (mmengine) checkpoint already',
                      expected + '; use it as it is')
    if 'head.weight' in state or any(k.startswith('fc_norm.') for k in state):
        raise _refuse(
            src, 'it is a fine-tuned classifier (head / fc_norm)',
            expected + ': the pretraining file, not a fine-tuned '
            'one')
    other = [k for k in state if rename(k) is None]
    if other:
        raise _refuse(
            src, f'it holds keys no MAE/HPM ViT has, e.g. '
            f'{other[:3]} (another method: BEiT, SimMIM, ...?)', expected)
    need = ('patch_embed.proj.weight', 'cls_token', 'pos_embed',
            'blocks.0.attn.qkv.weight', 'norm.weight')
    missing = [k for k in need if k not in state]
    if missing:
        raise _refuse(src, f'it lacks {missing}', expected)
    return state


def read_arch(state: dict,
              args=None,
              num_heads: Optional[int] = None,
              decoder_num_heads: Optional[int] = None,
              src: str = 'the checkpoint') -> dict:
    """The model's sizes, from the tensors' shapes; the heads (which no
    shape holds) from ``num_heads``, else ``args.model`` where its width
    matches, else the standard ViT of that width; ``norm_pix`` from
    ``args.norm_pix_loss``, else the recipe of the layout."""
    proj, pos = state['patch_embed.proj.weight'], state['pos_embed']
    dim, in_ch, patch = proj.shape[0], proj.shape[1], proj.shape[-1]
    side = int(round((pos.shape[1] - 1)**.5))
    depth = _count(state, 'blocks')
    ffn = state['blocks.0.mlp.fc1.weight'].shape[0]
    shapes_ok = (
        state['cls_token'].shape[-1] == dim and side * side == pos.shape[1] - 1
        and state['blocks.0.attn.qkv.weight'].shape == (3 * dim, dim)
        and proj.shape[-2] == patch)
    if not shapes_ok:
        raise _refuse(
            src, f'its shapes fit no ViT (patch_embed {tuple(proj.shape)}, '
            f'pos_embed {tuple(pos.shape)}, qkv '
            f"{tuple(state['blocks.0.attn.qkv.weight'].shape)})",
            'a square grid of patches plus a cls token, qkv (3C, C)')
    layout = 'hpm' if 'decoder_blocks_losspred.0.attn.qkv.weight' in state \
        else 'mae_visualize' if 'decoder_blocks.0.attn.qkv.weight' in state \
        else 'mae_pretrain'
    named, note = getattr(args, 'model', None), None
    size = re.search(r'vit_(tiny|small|base|large|huge)', str(named or ''))
    if num_heads is None and size:
        by_name = {n: h for d, (n, h) in VIT_SIZES.items()}
        if VIT_SIZES.get(dim, ('', 0))[0] == size.group(1):
            num_heads = by_name[size.group(1)]
        else:  # the authors' ViT-L script built a ViT-B, say: shapes win
            note = (f'args.model is {named!r} but the tensors are a {dim}-d, '
                    f'{depth}-block ViT: the tensors are followed')
    if num_heads is None:
        if dim not in VIT_SIZES:
            raise HPMError(
                f'{src}: a {dim}-d encoder is no standard ViT width '
                f'({sorted(VIT_SIZES)}), and the tensors do not hold the '
                'number of heads. Fix: pass num_heads (--num-heads N).')
        num_heads = VIT_SIZES[dim][1]
    dec = state.get('decoder_embed.weight')
    dec_dim = 512 if dec is None else dec.shape[0]
    if decoder_num_heads is None:
        if dec_dim != 512:
            raise HPMError(
                f'{src}: a {dec_dim}-d decoder (MAE and HPM release 512-d, '
                '16 heads), and the tensors do not hold its number of '
                'heads. Fix: pass decoder_num_heads (--decoder-num-heads N).')
        decoder_num_heads = 16
    dec_depth = _count(state, 'decoder_blocks') or 8
    fc1 = state.get('decoder_blocks.0.mlp.fc1.weight')
    norm_pix = getattr(args, 'norm_pix_loss', None)
    return dict(
        layout=layout,
        embed_dims=dim,
        num_layers=depth,
        num_heads=num_heads,
        feedforward_channels=ffn,
        patch_size=patch,
        in_channels=in_ch,
        img_size=side * patch,
        decoder_embed_dim=dec_dim,
        decoder_depth=dec_depth,
        decoder_num_heads=decoder_num_heads,
        decoder_mlp_ratio=4 if fc1 is None else fc1.shape[0] // dec_dim,
        predictor_depth=_count(state, 'decoder_blocks_losspred') or dec_depth,
        # the authors' scripts train without it; MAE's released models with
        norm_pix=bool(norm_pix) if norm_pix is not None else layout != 'hpm',
        note=note)


def official_config(arch: dict):
    """The HPM config of ``arch`` as its text and as a config: the
    repository's 800-epoch ImageNet config of that encoder (ViT-B/16 or
    ViT-L/16 at 224 px; else ViT-B/16's) with the sizes read from the
    file."""
    import tempfile

    from .config import load_config
    a = arch
    key = (a['embed_dims'], a['num_layers'], a['patch_size'], a['img_size'])
    base = BASE_CONFIGS.get(key, BASE_CONFIGS[(768, 12, 16, 224)])
    model = dict(
        backbone=dict(
            arch=dict(
                _delete_=True,  # the base names its arch ('b')
                embed_dims=a['embed_dims'],
                num_layers=a['num_layers'],
                num_heads=a['num_heads'],
                feedforward_channels=a['feedforward_channels']),
            img_size=a['img_size'],
            patch_size=a['patch_size'],
            patch_cfg=dict(in_channels=a['in_channels'])),
        neck=dict(
            num_patches=(a['img_size'] // a['patch_size'])**2,
            patch_size=a['patch_size'],
            in_chans=a['in_channels'],
            embed_dim=a['embed_dims'],
            decoder_embed_dim=a['decoder_embed_dim'],
            decoder_depth=a['decoder_depth'],
            decoder_num_heads=a['decoder_num_heads'],
            mlp_ratio=a['decoder_mlp_ratio'],
            predictor_depth=a['predictor_depth']),
        head=dict(
            patch_size=a['patch_size'],
            in_channels=a['in_channels'],
            norm_pix=a['norm_pix']))
    text = (f'# {LAYOUTS[a["layout"]]} weights imported by '
            'tools/model_converters/official2hpm.py: the sizes read from '
            f"the file\n_base_ = 'hpm_mm::{base}'\n" +
            Config(dict(model=model)).pretty_text)
    with tempfile.TemporaryDirectory() as tmp:
        path = osp.join(tmp, 'imported.py')
        with open(path, 'w') as f:
            f.write(text)
        cfg = load_config(path)
    return text, cfg


def import_official(src: str,
                    out: str,
                    num_heads: Optional[int] = None,
                    decoder_num_heads: Optional[int] = None) -> dict:
    """Write the official checkpoint ``src`` as an hpm_mm HPM checkpoint
    ``out`` (its config saved in it and beside it as ``out``'s ``.py``):
    student = the file's ``model``, teacher = its EMA entry where it has
    one (:data:`EMA_KEYS`), else the same weights; no optimizer state. Parts
    the file lacks (MAE's: the loss predictor, and the reconstructor of an
    encoder-only file) start freshly initialised, named in ``meta.imported
    .untrained``. Returns what was imported.

    Raises:
        HPMError: ``src`` is not such a file (one line; nothing written)."""
    from mmpretrain.registry import MODELS

    from hpm_mm.engine.safe_load import check_finite, load_file
    from hpm_mm.engine.work_dir import check_writable
    check_writable(out, 'the imported checkpoint')
    ckpt = load_file(src)
    state = official_state(ckpt, src)
    args = ckpt.get('args')
    arch = read_arch(state, args, num_heads, decoder_num_heads, src)
    check_finite(state, src)
    text, cfg = official_config(arch)
    model = MODELS.build(cfg.model)
    model.init_weights()
    mapped = {rename(k): v for k, v in state.items()}
    expected = model.state_dict()
    wrong = [
        k for k, v in mapped.items()
        if k not in expected or expected[k].shape != v.shape
    ]
    if wrong:
        raise _refuse(
            src, f'{len(wrong)} tensors fit no {arch["layout"]} '
            f'model of its sizes, e.g. {wrong[:3]}',
            'one trained under one of the authors\' model names')
    model.load_state_dict(mapped, strict=False)
    untrained = sorted({
        p
        for p in ('neck.predictor.', 'neck.decoder_blocks.', 'neck.ln1.',
                  'neck.decoder_pred.', 'neck.decoder_embed.')
        if not any(k.startswith(p) for k in mapped)
    })
    teacher = model.teacher
    teacher.update_parameters(model.student())  # its first update: a copy
    ema = next((ckpt[k] for k in EMA_KEYS if isinstance(ckpt.get(k), dict)),
               None)
    if ema is not None:
        where = {
            name: part
            for part, m in model.student().items()
            for name, mm in model.named_children() if mm is m
        }
        ema = {rename(k): v for k, v in official_state(ema, src).items()}
        check_finite(ema, f'{src} (EMA)')
        teacher.module.load_state_dict(
            {
                f'{where[k.split(".")[0]]}.{k.split(".", 1)[1]}': v
                for k, v in ema.items() if k.split('.')[0] in where
            },
            strict=False)
    imported = dict(
        source=osp.abspath(src),
        layout=arch['layout'],
        teacher='ema' if ema is not None else 'student',
        epoch=ckpt.get('epoch'),
        untrained=untrained,
        arch=arch)
    config_path = osp.splitext(out)[0] + '.py'
    with open(config_path, 'w') as f:
        f.write(text)
    part = f'{out}.{os.getpid()}.part'
    torch.save(
        dict(
            state_dict=model.state_dict(),
            meta=dict(cfg=cfg.pretty_text, imported=imported)), part)
    os.replace(part, out)
    imported['message'] = (
        f'{src}: {LAYOUTS[arch["layout"]]} ViT {arch["embed_dims"]}-d x '
        f'{arch["num_layers"]} blocks, patch {arch["patch_size"]}, '
        f'{arch["img_size"]} px; teacher = the '
        f"{'EMA weights' if ema is not None else 'same weights'}" +
        (f'; {arch["note"]}' if arch['note'] else '') +
        (f'; untrained (freshly initialised): {", ".join(untrained)}: the '
         'hard-patch pictures refuse it until HPM pretraining (load_from) '
         'trains the loss predictor' if untrained else ''))
    return dict(imported, out=out, config=config_path)
