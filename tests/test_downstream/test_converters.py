"""tools/model_converters/hpm2backbone.py: exact conversions, strict
reports, clear refusals."""

import pytest
import torch
from helpers import ARCH, NEEDS_FULL, rewrite_is_whole, tool_main

import hpm_mm  # noqa: F401
from hpm_mm.apis.convert import convert, encoder_state


def _run(*args):
    return tool_main('model_converters/hpm2backbone.py', *args)


@pytest.mark.parametrize('target,img,teacher',
                         [('mmpretrain', 64, False),
                          pytest.param('mmdet', 128, False, marks=NEEDS_FULL),
                          pytest.param('mmdet', 128, True, marks=NEEDS_FULL),
                          pytest.param('mmseg', 96, False, marks=NEEDS_FULL)])
def test_round_trip_is_strict(tmp_path, rgb_hpm_checkpoint, target, img,
                              teacher):
    out = tmp_path / 'out.pth'
    args = [
        rgb_hpm_checkpoint,
        str(out), '--target', target, '--img-size',
        str(img)
    ] + (['--teacher'] if teacher else [])
    proc = _run(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'every tensor of the backbone loaded' in proc.stdout
    state = torch.load(out, map_location='cpu')['state_dict']
    assert state
    if target == 'mmpretrain':  # a stopped rerun keeps the earlier file
        rewrite_is_whole(out, lambda: _run(*args))


def _vit(img_size):
    from mmpretrain.models import VisionTransformer
    return VisionTransformer(
        arch=ARCH,
        img_size=img_size,
        patch_size=16,
        out_type='raw',
        final_norm=True)


@NEEDS_FULL
def test_mmseg_and_timm_compute_the_pretrained_function(rgb_hpm_checkpoint):
    """The converted backbones give the pretrained encoder's features."""
    ckpt = torch.load(rgb_hpm_checkpoint, map_location='cpu')
    enc = encoder_state(ckpt)
    ref = _vit(64)
    ref.load_state_dict(enc)
    ref.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        tokens = ref(x)[0]  # (B, 1 + 16, C) after the final norm

    import timm
    tm = timm.models.vision_transformer.VisionTransformer(
        img_size=64,
        patch_size=16,
        embed_dim=64,
        depth=4,
        num_heads=2,
        mlp_ratio=2,
        num_classes=0)
    tm.load_state_dict(convert(enc, 'timm', (4, 4)))
    tm.eval()
    with torch.no_grad():
        assert torch.allclose(tm.forward_features(x), tokens, atol=1e-5)

    from mmseg.models.backbones import MAE
    seg = MAE(
        img_size=(64, 64),
        patch_size=16,
        embed_dims=64,
        num_layers=4,
        num_heads=2,
        mlp_ratio=2,
        init_values=1.0,
        out_indices=[3],
        norm_cfg=dict(type='LN', eps=1e-6))  # as the pretrained ViT
    missing, unexpected = seg.load_state_dict(
        convert(enc, 'mmseg', (4, 4)), strict=False)
    assert unexpected == []
    assert all('relative_position' in k for k in missing)
    seg.eval()
    ref_nonorm = _vit(64)
    ref_nonorm.load_state_dict(enc)
    ref_nonorm.ln1 = torch.nn.Identity()  # mmseg's MAE has no final norm
    ref_nonorm.eval()
    with torch.no_grad():
        want = ref_nonorm(x)[0][:, 1:].transpose(1, 2).reshape(2, 64, 4, 4)
        got = seg(x)[0]
    assert torch.allclose(got, want, atol=1e-5)


def test_position_embedding_interpolated_for_detection(rgb_hpm_checkpoint):
    enc = encoder_state(torch.load(rgb_hpm_checkpoint, map_location='cpu'))
    out = convert(enc, 'mmdet', (8, 8))
    assert out['pos_embed'].shape == (1, 8, 8, 64)
    assert 'cls_token' not in out and 'ln1.weight' not in out
    same = convert(enc, 'mmdet', (4, 4))['pos_embed']
    assert torch.equal(same.reshape(1, 16, 64), enc['pos_embed'][:, 1:])


def test_a_ddp_wrapped_checkpoint_converts(rgb_hpm_checkpoint):
    """A checkpoint saved from a DDP-wrapped model (keys under ``module.``)
    is read as every load reads it (it was "not an HPM/MAE pretraining
    checkpoint")."""
    ckpt = torch.load(rgb_hpm_checkpoint, map_location='cpu')
    wrapped = {'module.' + k: v for k, v in ckpt['state_dict'].items()}
    enc, got = encoder_state(ckpt), encoder_state(dict(state_dict=wrapped))
    assert enc.keys() == got.keys() and 'pos_embed' in got
    assert all(torch.equal(enc[k], got[k]) for k in enc)


def test_refuses_non_hpm_checkpoints(tmp_path):
    bad = tmp_path / 'resnet.pth'
    torch.save(dict(state_dict={'backbone.conv1.weight': torch.zeros(1)}), bad)
    proc = _run(str(bad), str(tmp_path / 'o.pth'), '--target', 'mmdet')
    assert proc.returncode != 0
    assert 'not an HPM/MAE pretraining checkpoint' in proc.stderr
    assert not (tmp_path / 'o.pth').exists()


@pytest.mark.parametrize('teacher', [False, True])
def test_timm_folder_loads_in_timm_with_the_encoders_features(
        tmp_path, rgb_hpm_checkpoint, teacher):
    """--target timm writes a timm model folder: timm.create_model(
    'local-dir:...', pretrained=True) loads it strictly and computes the
    pretrained encoder's features; the files match SHA256SUMS, the .pth is
    a plain state dict."""
    import hashlib
    import json

    import timm
    out = tmp_path / 'timm_vit'
    proc = _run(rgb_hpm_checkpoint, str(out), '--target', 'timm',
                *(['--teacher'] if teacher else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "timm.create_model('local-dir:" in proc.stdout
    files = {p.name for p in out.iterdir()}
    assert files == {
        'model.safetensors', 'config.json', 'pytorch_model.pth', 'SHA256SUMS'
    }
    for line in (out / 'SHA256SUMS').read_text().splitlines():
        digest, name = line.split('  ')
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    config = json.loads((out / 'config.json').read_text())
    pre = config['pretrained_cfg']
    assert pre['input_size'] == [3, 64, 64]
    # the pretraining's normalisation (the tiny HPM's: mean 0, std 1 in
    # 0-255 units), in timm's 0-1 units
    assert pre['mean'] == [0.] * 3 and pre['std'] == [1 / 255] * 3
    assert config['model_args']['embed_dim'] == 64
    model = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    assert list(model.pretrained_cfg['mean']) == pre['mean']
    ckpt = torch.load(rgb_hpm_checkpoint, map_location='cpu')
    ref = _vit(64)
    ref.load_state_dict(encoder_state(ckpt, teacher))
    ref.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(model.forward_features(x), ref(x)[0], atol=1e-5)
    state = torch.load(out / 'pytorch_model.pth', weights_only=True)
    assert set(state) == set(model.state_dict())


def test_converter_refusals_are_one_line(tmp_path, rgb_hpm_checkpoint,
                                         monkeypatch):
    """A diverged checkpoint, --teacher on a run without one, an
    --img-size the patch does not divide (it blamed the checkpoint) and
    --target timm without its packages: one line each, nothing written."""
    ckpt = torch.load(rgb_hpm_checkpoint, map_location='cpu')
    state = ckpt['state_dict']
    nan = dict(
        ckpt,
        state_dict={
            k: v.float() * float('nan') if v.is_floating_point() else v
            for k, v in state.items()
        })
    student_only = dict(
        ckpt,
        state_dict={
            k: v
            for k, v in state.items() if not k.startswith('teacher.')
        })
    cases = [(nan, [], 'non-finite values (NaN/inf)'),
             (student_only, ['--teacher'], 'this run has no EMA teacher'),
             (ckpt, ['--img-size', '30'], 'not a multiple of the')]
    for i, (data, extra, words) in enumerate(cases):
        path = tmp_path / f'c{i}.pth'
        torch.save(data, path)
        proc = _run(
            str(path), str(tmp_path / f'o{i}.pth'), '--target', 'mmpretrain',
            *extra)
        assert proc.returncode == 1 and words in proc.stderr, proc.stderr
        assert 'Fix:' in proc.stderr and not (tmp_path / f'o{i}.pth').exists()
    import hpm_mm.apis.convert as conv
    monkeypatch.setattr(conv, 'TIMM_FOLDER_PACKAGES', ('timm', 'no_such_pkg'))
    proc = _run(rgb_hpm_checkpoint, str(tmp_path / 'tf'), '--target', 'timm')
    assert proc.returncode == 1
    assert 'needs no_such_pkg' in proc.stderr and \
        'pip install -r requirements/optional.txt' in proc.stderr
    assert not (tmp_path / 'tf').exists()


def test_a_backbone_that_does_not_fit_is_one_line_naming_it(
        tmp_path, rgb_hpm_checkpoint):
    """The converted encoder is held to the one strict-load rule
    (``check_fills``): a tensor of another shape, or one the backbone
    lacks, is one line naming it (a report of many lines had ended in a
    line naming none); a config given as the checkpoint says so (it was
    'damaged ... copy the file again')."""
    ckpt = torch.load(rgb_hpm_checkpoint, map_location='cpu')
    for i, (key, value) in enumerate([
        ('backbone.layers.0.ln1.weight', torch.ones(3)),
        ('backbone.layers.0.gamma_1', torch.ones(64))
    ]):
        path = tmp_path / f'c{i}.pth'
        torch.save(
            dict(ckpt, state_dict={
                **ckpt['state_dict'], key: value
            }), path)
        proc = _run(path, tmp_path / 'o.pth', '--target', 'mmpretrain')
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert key[len('backbone.'):] in lines[0] and 'Fix:' in lines[0]
    config = tmp_path / 'hpm_folder.py'
    config.write_text("_base_ = 'x.py'\n")
    proc = _run(config, tmp_path / 'o.pth', '--target', 'mmpretrain')
    assert proc.returncode == 1 and 'it is a config file (.py), not a ' \
        'checkpoint. Fix:' in proc.stderr, proc.stderr
    assert not (tmp_path / 'o.pth').exists()


def test_a_timm_folder_is_written_as_a_set(tmp_path, rgb_hpm_checkpoint):
    """--target timm's four files are one set: a rerun writes over the
    folder hpm_mm wrote (its config.json holds the mark); one stopped
    half-way through its pytorch_model.pth leaves the earlier four files
    and no part file (a cut pytorch_model.pth was left)."""
    from hpm_mm.apis.convert import TIMM_FILES
    out = tmp_path / 'timm_vit'
    args = (rgb_hpm_checkpoint, out, '--target', 'timm')
    for _ in range(2):
        assert _run(*args).returncode == 0
    rewrite_is_whole([out / n for n in TIMM_FILES], lambda: _run(*args))
