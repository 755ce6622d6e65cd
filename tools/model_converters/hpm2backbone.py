"""Convert an HPM pretraining checkpoint into a downstream backbone.

    python tools/model_converters/hpm2backbone.py CKPT OUT \
        --target {mmpretrain,mmdet,mmseg,timm} [--teacher] \
        [--img-size 1024] [--arch b]

Builds the target backbone (from the checkpoint's own config when it has
one, else ``--arch``) and loads the converted weights into it, strictly:
every tensor of it, name and shape, and none it lacks (else one line naming
the first), but those it initialises by design (relative-position tables).
Writes
``{'state_dict': ..., 'meta': {...}}`` to OUT; with ``--target timm`` OUT is
a timm model folder (``model.safetensors``, ``config.json`` with the
model's arguments and its mean / std / input size, ``pytorch_model.pth``,
``SHA256SUMS``) that ``timm.create_model('local-dir:OUT', pretrained=True)``
loads. A checkpoint holding NaN/inf is refused.
"""
import argparse
import os.path as osp
import sys

from hpm_mm.errors import HPMError, exit_status

# keys a target initialises itself by design (absent from any MAE/HPM ckpt)
FRESH = {
    'mmpretrain': (),
    'mmdet': ('rel_pos_h', 'rel_pos_w'),
    'mmseg': ('relative_position_bias_table', 'relative_position_index'),
    'timm': (),
}
ARCHS = {
    's': (384, 12, 6),
    'b': (768, 12, 12),
    'l': (1024, 24, 16),
    'h': (1280, 32, 16)
}


def arch_from_checkpoint(ckpt, enc, fallback):
    """(embed_dims, num_layers, num_heads, feedforward) of the encoder."""
    dim = enc['cls_token'].shape[-1]
    depth = 1 + max(
        int(k.split('.')[1]) for k in enc if k.startswith('layers.'))
    ffn = enc['layers.0.ffn.layers.0.0.weight'].shape[0]
    heads = None
    from hpm_mm.apis.convert import saved_config
    cfg = saved_config(ckpt)
    if cfg is not None:
        try:
            arch = cfg.model.backbone.arch
            heads = arch['num_heads'] if isinstance(arch, dict) else None
            if isinstance(arch, str):
                heads = {
                    'b': 12,
                    'base': 12,
                    'l': 16,
                    'large': 16,
                    's': 6,
                    'small': 6,
                    'h': 16,
                    'huge': 16
                }.get(arch)
        except Exception:  # an unparsable config: fall back to --arch
            heads = None
    if heads is None:
        heads = ARCHS[fallback][2] if fallback in ARCHS else max(1, dim // 64)
    return dim, depth, heads, ffn


def build_target(target, dim, depth, heads, ffn, img_size, patch_size,
                 in_channels):
    if target == 'mmpretrain':
        from mmpretrain.models import VisionTransformer
        return VisionTransformer(
            arch=dict(
                embed_dims=dim,
                num_layers=depth,
                num_heads=heads,
                feedforward_channels=ffn),
            img_size=img_size,
            patch_size=patch_size,
            in_channels=in_channels)
    if target == 'mmdet':
        from mmpretrain.models import ViTSAM
        step = max(depth // 4, 1)
        return ViTSAM(
            arch=dict(
                embed_dims=dim,
                num_layers=depth,
                num_heads=heads,
                feedforward_channels=ffn,
                global_attn_indexes=list(range(step - 1, depth, step))),
            img_size=img_size,
            patch_size=patch_size,
            out_channels=0,
            in_channels=in_channels,
            window_size=min(14, img_size // patch_size))
    if target == 'mmseg':
        from mmseg.models.backbones import MAE
        return MAE(
            img_size=(img_size, img_size),
            patch_size=patch_size,
            in_channels=in_channels,
            embed_dims=dim,
            num_layers=depth,
            num_heads=heads,
            mlp_ratio=ffn // dim,
            init_values=1.0)
    import timm
    return timm.models.vision_transformer.VisionTransformer(
        **timm_args(dim, depth, heads, ffn, img_size, patch_size, in_channels))


def timm_args(dim, depth, heads, ffn, img_size, patch_size, in_channels):
    """timm ``VisionTransformer`` arguments of the encoder (no head)."""
    return dict(
        img_size=img_size,
        patch_size=patch_size,
        in_chans=in_channels,
        embed_dim=dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=ffn / dim,
        num_classes=0)


def timm_pretrained_cfg(ckpt, in_channels, img_size, src, teacher):
    """timm's pretrained config: the pretraining's normalisation (the
    config's data_preprocessor mean / std, in 0-1 units), input size."""
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    from hpm_mm.apis.convert import saved_config
    cfg = saved_config(ckpt)
    if cfg is not None:
        pre = cfg.get('data_preprocessor') or cfg.get(
            'model', {}).get('data_preprocessor') or {}
        if pre.get('mean') is not None and pre.get('std') is not None:
            mean = [m / 255 for m in pre['mean']]
            std = [s / 255 for s in pre['std']]
    if len(mean) != in_channels:
        mean, std = [sum(mean) / len(mean)] * in_channels, \
            [sum(std) / len(std)] * in_channels
    return dict(
        input_size=(in_channels, img_size, img_size),
        fixed_input_size=True,
        mean=tuple(mean),
        std=tuple(std),
        interpolation='bicubic',
        crop_pct=1.0,
        num_classes=0,
        tag=f"hpm_mm {'teacher' if teacher else 'student'} of "
        f'{osp.basename(src)}')


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='an hpm_mm pretraining checkpoint')
    parser.add_argument(
        'dst', help='the backbone checkpoint to write (timm: a folder)')
    parser.add_argument(
        '--target',
        required=True,
        choices=['mmpretrain', 'mmdet', 'mmseg', 'timm'],
        help='the toolkit whose ViT reads it')
    parser.add_argument(
        '--teacher',
        action='store_true',
        help="the EMA teacher's encoder instead of the "
        "student's")
    parser.add_argument(
        '--img-size',
        type=int,
        default=None,
        help='target input size (the position embedding is '
        'interpolated); defaults to the pretraining size')
    parser.add_argument(
        '--arch',
        default='b',
        help='s/b/l/h, used when the checkpoint has no config')
    args = parser.parse_args(argv)
    from hpm_mm.apis.convert import TIMM_FILES, convert, encoder_state
    from hpm_mm.engine.safe_load import (check_fills, check_finite, load_file,
                                         save_file)
    from hpm_mm.engine.work_dir import MARK, plan_outputs
    timm = args.target == 'timm'
    plan_outputs(  # before the work
        [osp.join(args.dst, n) for n in TIMM_FILES] if timm else [args.dst],
        'the converted backbone', [args.src], osp.join(args.dst,
                                                       'config.json'), timm)
    ckpt = load_file(args.src)  # weights_only=True, the allow-list
    enc = encoder_state(ckpt, args.teacher, args.src)
    check_finite(enc, args.src)
    if timm:
        import importlib.util

        from hpm_mm.apis.convert import TIMM_FOLDER_PACKAGES
        lacking = [
            m for m in TIMM_FOLDER_PACKAGES
            if importlib.util.find_spec(m) is None
        ]
        if lacking:
            raise HPMError(
                '--target timm writes a timm model folder and needs '
                f'{", ".join(lacking)}, which this environment lacks. Fix: '
                'pip install -r requirements/optional.txt (the pinned timm, '
                'safetensors, huggingface_hub)')
    proj = enc['patch_embed.projection.weight']
    patch, in_ch = proj.shape[-1], proj.shape[1]
    n = enc['pos_embed'].shape[1] - 1
    img_size = args.img_size or int(round(n**0.5)) * patch
    if img_size % patch:
        lo = img_size // patch * patch
        raise HPMError(f'--img-size {img_size} is not a multiple of the '
                       f'{patch} px patch. Fix: {lo or patch} or '
                       f'{lo + patch}.')
    grid = (img_size // patch, img_size // patch)
    state = convert(enc, args.target, grid)

    dim, depth, heads, ffn = arch_from_checkpoint(ckpt, enc, args.arch)
    model = build_target(args.target, dim, depth, heads, ffn, img_size, patch,
                         in_ch)
    to_load = {
        k[len('backbone.'):] if args.target == 'mmpretrain' else k: v
        for k, v in state.items()
    }
    expected = {  # (but what the target initialises by design)
        k: v
        for k, v in model.state_dict().items()
        if k.split('.')[-1] not in FRESH[args.target]
    }
    check_fills(  # the one strict-load rule, in the target's names
        expected, to_load, f'{args.src} as the {args.target} backbone',
        'an HPM or MAE ViT pretraining checkpoint (its encoder converts '
        'exactly)', True)
    model.load_state_dict(to_load, strict=False)
    fresh = len(model.state_dict()) - len(expected)
    print(f'[{args.target}] every tensor of the backbone loaded '
          f'({len(to_load)}); {fresh} initialised by the target by design '
          '(relative-position tables)')
    if timm:
        from hpm_mm.apis.convert import timm_folder
        sums = timm_folder(
            state, args.dst,
            timm_args(dim, depth, heads, ffn, img_size, patch, in_ch),
            timm_pretrained_cfg(ckpt, in_ch, img_size, args.src, args.teacher))
        print(f'wrote the timm model folder {args.dst}: ' + ', '.join(sums) +
              ", SHA256SUMS; load it with "
              f"timm.create_model('local-dir:{args.dst}', pretrained=True)")
        return
    save_file(  # whole or not at all: an earlier dst survives a stop
        dict(
            state_dict=state,
            meta=dict(
                source=osp.abspath(args.src),
                target=args.target,
                teacher=args.teacher,
                img_size=img_size,
                **{MARK: 'hpm2backbone.py'})), args.dst)
    print(f'wrote {args.dst}')


def main(argv=None):
    return exit_status('hpm2backbone.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
