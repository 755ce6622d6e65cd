"""tools/model_converters/target_weights.py: DINO (timm layout) and CLIP
releases -> the files the feature-target configs load, exactly."""
import os.path as osp

import torch
from helpers import rewrite_is_whole, tool_main
from mmpretrain.models import VisionTransformer
from mmpretrain.models.utils.clip_generator_helper import \
    VisionTransformer as CLIPViT
from mmpretrain.registry import MODELS

import hpm_mm  # noqa: F401
from hpm_mm.apis.convert import convert, from_timm


def test_dino_release_round_trip(tmp_path):
    torch.manual_seed(0)
    arch = dict(
        embed_dims=64, num_layers=2, num_heads=1, feedforward_channels=256)
    vit = VisionTransformer(arch=arch, img_size=32, patch_size=8)
    mine = vit.state_dict()
    timm = convert(mine, 'timm')  # what DINO's release looks like
    timm['head.weight'] = torch.zeros(3)  # a DINO head: dropped
    assert {
        k[len('backbone.'):]: v
        for k, v in from_timm(timm).items()
    }.keys() == mine.keys()
    # the full DINO checkpoint keeps it under teacher / module.backbone.
    src, dst = str(tmp_path / 'dino.pth'), str(tmp_path / 'out.pth')
    torch.save(
        {'teacher': {
            'module.backbone.' + k: v
            for k, v in timm.items()
        }}, src)
    proc = tool_main('model_converters/target_weights.py', 'dino', src, dst)
    assert proc.returncode == 0, proc.stderr
    assert 'every tensor of the target network loaded' in proc.stdout
    target = MODELS.build(
        dict(
            type='ViTFeatureTarget',
            checkpoint=dst,
            arch=arch,
            img_size=32,
            patch_size=8))
    target.init_weights()
    for k, v in target.network.state_dict().items():
        assert torch.equal(v, mine[k]), k
    rewrite_is_whole(  # a stopped rerun keeps the earlier file
        dst, lambda: tool_main('model_converters/target_weights.py', 'dino',
                               src, dst))


def test_clip_release(tmp_path):
    torch.manual_seed(0)
    visual = CLIPViT(
        input_resolution=32,
        patch_size=8,
        width=64,
        layers=2,
        heads=1,
        output_dim=24)
    state = {'visual.' + k: v for k, v in visual.state_dict().items()}
    state['text_projection'] = torch.zeros(8, 24)  # the text tower: unused
    src, dst = str(tmp_path / 'clip.pt'), str(tmp_path / 'out.pth')
    torch.save(state, src)
    proc = tool_main('model_converters/target_weights.py', 'clip', src, dst)
    assert proc.returncode == 0, proc.stderr
    assert 'every tensor of the target network loaded' in proc.stdout
    target = MODELS.build(
        dict(
            type='CLIPFeatureTarget',
            checkpoint=dst,
            img_size=32,
            patch_size=8,
            width=64,
            layers=2,
            heads=1,
            output_dim=24))
    target.init_weights()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(target(x), visual(x)[0][:, 1:])


def test_a_release_that_does_not_fit_is_one_line_naming_it(tmp_path):
    """A DINO ViT whose MLP is 2x its width (the target network is built
    with 4x): one line naming the tensor in the release's names, nothing
    written (it was a RuntimeError traceback from load_state_dict)."""
    arch = dict(
        embed_dims=64, num_layers=1, num_heads=1, feedforward_channels=128)
    vit = VisionTransformer(arch=arch, img_size=32, patch_size=8)
    src, dst = str(tmp_path / 'dino.pth'), str(tmp_path / 'out.pth')
    torch.save(convert(vit.state_dict(), 'timm'), src)
    proc = tool_main('model_converters/target_weights.py', 'dino', src, dst)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert 'have another shape (e.g. blocks.0.mlp.fc1.weight: (128, 64) in ' \
        'the file, (256, 64) in the model)' in lines[0] and 'Fix:' in lines[0]
    assert not osp.exists(dst)
