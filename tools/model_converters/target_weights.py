"""Convert released DINO / CLIP weights into the files the feature-target
configs read (paper Tab. 1; see docs/targets.md).

    python tools/model_converters/target_weights.py dino \
        dino_vitbase16_pretrain.pth \
        data/pretrained/dino_vit-base-p16_mmpretrain.pth
    python tools/model_converters/target_weights.py clip ViT-B-16.pt \
        data/pretrained/clip_vit-base-p16.pth

``dino``: DINO's ViT (timm key layout) -> mmpretrain ``VisionTransformer``
keys under ``backbone.`` (:class:`ViTFeatureTarget`). ``clip``: OpenAI's
CLIP release (a TorchScript archive, or a plain state dict) -> its
``visual.*`` image-encoder weights (:class:`CLIPFeatureTarget`). Either way
every tensor of the target network is checked in the release, name and
shape (else one line naming it), before the result is loaded into it and
written.
"""
import argparse
import sys

import torch

from hpm_mm.errors import HPMError, exit_status


def read_state(path: str) -> dict:
    """A state dict from a plain checkpoint or a TorchScript archive."""
    from hpm_mm.engine.safe_load import load_file
    try:
        obj = load_file(path)  # weights_only=True, the allow-list
    except HPMError:  # code in it, or a damaged file: its one line
        raise
    except Exception:  # OpenAI's CLIP .pt files are TorchScript archives
        obj = torch.jit.load(path, map_location='cpu').state_dict()
    if isinstance(obj, dict):
        for key in ('state_dict', 'model', 'teacher'):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    return {strip_prefixes(k): v for k, v in obj.items()}


def strip_prefixes(key: str) -> str:
    """DINO's full checkpoints keep the ViT under ``module.backbone.``."""
    for prefix in ('module.', 'backbone.'):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


def convert(kind: str, state: dict):
    """(converted state, target network config) for ``kind``."""
    from mmpretrain.registry import MODELS

    from hpm_mm.apis.convert import from_timm
    if kind == 'dino':
        out = from_timm(state)
        dim = out['backbone.cls_token'].shape[-1]
        depth = 1 + max(
            int(k.split('.')[2])
            for k in out if k.startswith('backbone.layers.'))
        patch = out['backbone.patch_embed.projection.weight'].shape[-1]
        grid = round((out['backbone.pos_embed'].shape[1] - 1)**0.5)
        target = MODELS.build(
            dict(
                type='ViTFeatureTarget',
                checkpoint=None,
                patch_size=patch,
                img_size=grid * patch,
                arch=dict(
                    embed_dims=dim,
                    num_layers=depth,
                    num_heads=dim // 64,
                    feedforward_channels=4 * dim)))
        return out, target
    out = {k: v for k, v in state.items() if k.startswith('visual.')}
    if 'visual.proj' not in out:
        raise HPMError('not a CLIP ViT checkpoint: no visual.proj. Fix: '
                       "OpenAI's CLIP release (ViT-B-16.pt, ...).")
    width, _, patch, _ = out['visual.conv1.weight'].shape
    grid = round((out['visual.positional_embedding'].shape[0] - 1)**0.5)
    layers = len({
        k.split('.')[3]
        for k in out if k.startswith('visual.transformer.resblocks.')
    })
    target = MODELS.build(
        dict(
            type='CLIPFeatureTarget',
            checkpoint=None,
            img_size=grid * patch,
            patch_size=patch,
            width=width,
            layers=layers,
            heads=width // 64,
            output_dim=out['visual.proj'].shape[1]))
    return out, target


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('kind', choices=['dino', 'clip'], help='the release')
    parser.add_argument('src', help='the released file')
    parser.add_argument('dst', help='the weights file to write (.pth)')
    args = parser.parse_args(argv)
    from hpm_mm.apis.convert import TIMM_NAMES, rename
    from hpm_mm.engine.safe_load import check_fills, save_file
    from hpm_mm.engine.work_dir import MARK, plan_outputs
    plan_outputs([args.dst], 'the target weights', [args.src])  # first
    state = read_state(args.src)
    out, target = convert(args.kind, state)
    file_name = (lambda k: rename(k, TIMM_NAMES) or k) if args.kind == \
        'dino' else (lambda k: 'visual.' + k)
    check_fills(  # the one strict-load rule, in the release's names
        {
            file_name(k): v
            for k, v in target.network.state_dict().items()
        }, state, args.src,
        f"{args.kind}'s released ViT as published (64-d heads, an MLP 4x "
        'the width)')
    own = target.load_target_state(out)
    unused = target.network.load_state_dict(own, strict=False).unexpected_keys
    print(f'[{args.kind}] every tensor of the target network loaded '
          f'({len(own) - len(unused)}); {len(unused)} unused')
    meta = {MARK: 'target_weights.py'}
    save_file(dict(state_dict=out, meta=meta), args.dst)  # whole or nothing
    print(f'wrote {args.dst}')


def main(argv=None):
    return exit_status('target_weights.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
