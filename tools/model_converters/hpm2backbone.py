"""Convert an HPM pretraining checkpoint into a downstream backbone.

    python tools/model_converters/hpm2backbone.py CKPT OUT \
        --target {mmpretrain,mmdet,mmseg,timm} [--teacher] \
        [--img-size 1024] [--patch-size 16] [--arch b]

Builds the target backbone (from the checkpoint's own config when it has
one, else ``--arch``), loads the converted weights into it and prints a
strict report: every tensor must load; the only keys the target may add are
the ones it initialises by design (relative-position tables). Writes
``{'state_dict': ..., 'meta': {...}}``.
"""
import argparse
import os.path as osp

import torch

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
    cfg_text = ckpt.get('meta', {}).get('cfg')
    if cfg_text:
        from mmengine.config import Config
        try:
            arch = Config.fromstring(cfg_text, '.py').model.backbone.arch
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
        img_size=img_size,
        patch_size=patch_size,
        in_chans=in_channels,
        embed_dim=dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=ffn / dim,
        num_classes=0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src')
    parser.add_argument('dst')
    parser.add_argument(
        '--target',
        required=True,
        choices=['mmpretrain', 'mmdet', 'mmseg', 'timm'])
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
    import hpm_mm  # noqa: F401  (weights_only-safe loading of mmengine ckpts)
    from hpm_mm.apis.convert import convert, encoder_state
    from hpm_mm.engine.checkpoint import UnsafeCheckpointError, load_file
    try:
        ckpt = load_file(args.src)  # weights_only=True, the allow-list
    except UnsafeCheckpointError as e:
        raise SystemExit(f'hpm2backbone.py: {e}')
    try:
        enc = encoder_state(ckpt, args.teacher)
    except ValueError as e:
        raise SystemExit(f'{args.src}: {e}')
    proj = enc['patch_embed.projection.weight']
    patch, in_ch = proj.shape[-1], proj.shape[1]
    n = enc['pos_embed'].shape[1] - 1
    img_size = args.img_size or int(round(n**0.5)) * patch
    grid = (img_size // patch, img_size // patch)
    state = convert(enc, args.target, grid)

    dim, depth, heads, ffn = arch_from_checkpoint(ckpt, enc, args.arch)
    model = build_target(args.target, dim, depth, heads, ffn, img_size, patch,
                         in_ch)
    expected = model.state_dict()
    to_load = {
        k[len('backbone.'):] if args.target == 'mmpretrain' else k: v
        for k, v in state.items()
    }
    missing = [k for k in expected if k not in to_load]
    unexpected = [k for k in to_load if k not in expected]
    fresh = [k for k in missing if k.split('.')[-1] in FRESH[args.target]]
    missing = [k for k in missing if k not in fresh]
    shape_errors = [
        k for k in to_load
        if k in expected and to_load[k].shape != expected[k].shape
    ]
    print(f'[{args.target}] {len(to_load) - len(unexpected)} tensors '
          f'loaded, {len(missing)} missing, {len(unexpected)} unexpected, '
          f'{len(shape_errors)} shape mismatches; {len(fresh)} initialised '
          'by the target by design (relative-position tables)')
    for name, keys in (('missing', missing), ('unexpected', unexpected),
                       ('shape mismatch', shape_errors)):
        for k in keys:
            print(f'  {name}: {k}')
    if missing or unexpected or shape_errors:
        raise SystemExit('conversion is not exact; nothing written')
    model.load_state_dict(to_load, strict=False)
    torch.save(
        dict(
            state_dict=state,
            meta=dict(
                source=osp.abspath(args.src),
                target=args.target,
                teacher=args.teacher,
                img_size=img_size)), args.dst)
    print(f'wrote {args.dst}')


if __name__ == '__main__':
    main()
