"""tools/model_converters/official2hpm.py: the authors' released HPM files
and MAE's official ones, imported and checked number for number against an
independent rebuild of the authors' forward (timm's ``PatchEmbed`` /
``Block`` under the authors' key names, their ``models_mae_learn_loss.py``
written out), then through every path an hpm_mm checkpoint takes."""
import argparse
import hashlib
import os
import os.path as osp
import signal
from functools import partial

import pytest
import torch
import torch.nn as nn
from helpers import (NEEDS_FULL, make_image_folder, process, rewrite_is_whole,
                     tool_main, train)

import hpm_mm  # noqa: F401
from hpm_mm.errors import HPMError


class AuthorsMAE(nn.Module):
    """The authors' ``MaskedAutoencoderViT`` (HPM's encoder, reconstructor
    and loss predictor; ``decoder=False``: MAE's encoder-only release;
    ``predictor=False``: MAE's visualize release), random weights."""

    def __init__(self,
                 img=32,
                 patch=8,
                 dim=96,
                 depth=2,
                 heads=4,
                 dec_dim=32,
                 dec_depth=1,
                 dec_heads=2,
                 decoder=True,
                 predictor=True,
                 seed=0):
        from timm.models.vision_transformer import Block, PatchEmbed
        super().__init__()
        norm = partial(nn.LayerNorm, eps=1e-6)
        self.patch_embed = PatchEmbed(img, patch, 3, dim)
        n = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.ModuleList(
            Block(dim, heads, 4., qkv_bias=True, norm_layer=norm)
            for _ in range(depth))
        self.norm = norm(dim)
        if decoder:
            self.decoder_embed = nn.Linear(dim, dec_dim)
            self.mask_token = nn.Parameter(torch.zeros(1, 1, dec_dim))
            self.decoder_pos_embed = nn.Parameter(
                torch.zeros(1, n + 1, dec_dim))
            self.decoder_blocks = nn.ModuleList(
                Block(dec_dim, dec_heads, 4., qkv_bias=True, norm_layer=norm)
                for _ in range(dec_depth))
            self.decoder_norm = norm(dec_dim)
            self.decoder_pred = nn.Linear(dec_dim, patch**2 * 3)
        if predictor:
            self.decoder_blocks_losspred = nn.ModuleList(
                Block(dec_dim, dec_heads, 4., qkv_bias=True, norm_layer=norm)
                for _ in range(dec_depth))
            self.decoder_norm_losspred = norm(dec_dim)
            self.decoder_pred_losspred = nn.Linear(dec_dim, patch**2 * 3)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # every tensor random, norms included
            for name, p in self.named_parameters():
                p.copy_((1. if name.endswith('norm1.weight') else 0.) +
                        0.1 * torch.randn(p.shape, generator=g))
        self.p = patch

    def patchify(self, imgs):  # (N, 3, H, W) -> (N, L, p*p*3)
        p, h = self.p, imgs.shape[2] // self.p
        x = imgs.reshape(imgs.shape[0], 3, h, p, h, p)
        return torch.einsum('nchpwq->nhwpqc',
                            x).reshape(imgs.shape[0], h * h, p**2 * 3)

    def forward_encoder(self, x, mask):  # mask: (N, L) bool, True removed
        x = self.patch_embed(x) + self.pos_embed[:, 1:, :]
        N, _, D = x.shape
        x = x[~mask].reshape(N, -1, D)
        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(N, -1, -1)
        x = torch.cat((cls, x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward_decoder(self, x, mask):
        """(pixels, scores) in the authors' order: visible, then masked."""
        x = self.decoder_embed(x)
        x_vis = x[:, 1:, :]
        N, _, D = x_vis.shape
        pos = self.decoder_pos_embed[:, 1:, :].expand(N, -1, -1)
        pos_vis = pos[~mask].reshape(N, -1, D)
        pos_mask = pos[mask].reshape(N, -1, D)
        x_ = torch.cat([x_vis + pos_vis, self.mask_token + pos_mask], dim=1)
        x = torch.cat([x[:, :1, :] + self.decoder_pos_embed[:, :1, :], x_],
                      dim=1)
        s = x.clone()
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_pred(self.decoder_norm(x))[:, 1:, :]
        if not hasattr(self, 'decoder_blocks_losspred'):
            return x, None
        for blk in self.decoder_blocks_losspred:
            s = blk(s)
        s = self.decoder_pred_losspred(self.decoder_norm_losspred(s))
        return x, s[:, 1:, :].mean(dim=-1)


TINY = dict(
    img=32,
    patch=8,
    dim=96,
    depth=2,
    heads=4,
    dec_dim=32,
    dec_depth=1,
    dec_heads=2)
# ViT-B/16's tensors at 224 px (2 of its 12 blocks; the decoders 512-d,
# 16 heads, 1 block each): the heads come from the width, as for the
# released ViT-B file
VIT_B = dict(
    img=224,
    patch=16,
    dim=768,
    depth=2,
    heads=12,
    dec_dim=512,
    dec_depth=1,
    dec_heads=16)


def save_authors(path, ref, layout='hpm', ema=None, **args):
    """``ref`` saved as the authors' ``save_model`` does (MAE: model only)."""
    ckpt = dict(model=ref.state_dict())
    if layout == 'hpm':
        ckpt.update(
            optimizer=dict(state={}, param_groups=[dict(lr=1e-4)]),
            epoch=799,
            scaler=dict(scale=65536.),
            args=argparse.Namespace(norm_pix_loss=False, **args))
    if ema is not None:
        ckpt['model_ema'] = ema.state_dict()
    torch.save(ckpt, path)
    return str(path)


def import_(src, out, *extra):
    proc = tool_main('model_converters/official2hpm.py', src, out, *extra)
    return proc


def _mask(B, N, num_masked, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(B, N, generator=g).argsort(1)[:, :num_masked]
    return torch.zeros(B, N, dtype=torch.bool).scatter_(1, ids, True)


def compare(ref, config, ckpt, img, decoder=True, predictor=True):
    """Encoder tokens, reconstruction of the masked patches and per-patch
    scores of the imported model against ``ref``, same images, same mask."""
    from hpm_mm.apis import load_model
    model = load_model(config, ckpt, required=('backbone.', 'neck.'))
    x = torch.randn(2, 3, img, img, generator=torch.Generator().manual_seed(2))
    N = model.backbone.num_patches
    mask = _mask(2, N, int(N * 0.75))
    with torch.no_grad():
        want = ref.forward_encoder(x, mask)
        latent, ids_restore = model.backbone(x, mask.float(),
                                             N - mask[0].sum())
        torch.testing.assert_close(latent, want, atol=1e-5, rtol=1e-5)
        assert torch.equal(model.head.patchify(x), ref.patchify(x))
        if not decoder:
            return model
        pred, scores = model.neck(latent, ids_restore)
        ref_pred, ref_scores = ref.forward_decoder(want, mask)
        masked = mask.sum(1)[0]
        torch.testing.assert_close(  # the masked patches, raster order
            pred[mask].view(2, masked, -1),
            ref_pred[:, -masked:],
            atol=1e-5,
            rtol=1e-5)
        if predictor:
            ours = torch.cat(
                [scores[~mask].view(2, -1), scores[mask].view(2, -1)], 1)
            torch.testing.assert_close(ours, ref_scores, atol=1e-5, rtol=1e-5)
    return model


@pytest.mark.parametrize(
    'arch,extra', [
        (TINY, ['--num-heads', '4', '--decoder-num-heads', '2']),
        (VIT_B, []),
    ],
    ids=['tiny', 'vit-b'])
def test_the_authors_hpm_file_imports_number_for_number(tmp_path, arch, extra):
    ref = AuthorsMAE(**arch).eval()
    ema = AuthorsMAE(**arch, seed=5)
    name = 'mae_vit_base_patch16_dec512d8b' if arch is VIT_B else 'custom'
    src = save_authors(
        tmp_path / 'checkpoint-799.pth', ref, ema=ema, model=name)
    out = tmp_path / 'hpm_imported.pth'
    proc = import_(src, out, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = str(tmp_path / 'hpm_imported.py')
    assert osp.isfile(config) and out.is_file()
    compare(ref, config, str(out), arch['img'])
    # the teacher holds the file's EMA weights
    from hpm_mm.apis import load_model
    teacher = load_model(
        config, str(out), teacher=True, required=('backbone.', 'neck.'))
    x = torch.randn(1, 3, arch['img'], arch['img'])
    none = torch.zeros(1, teacher.backbone.num_patches, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(
            teacher.backbone(x, none.float(), none.shape[1])[0],
            ema.eval().forward_encoder(x, none),
            atol=1e-5,
            rtol=1e-5)
    saved = torch.load(out, map_location='cpu', weights_only=False)
    imported = saved['meta']['imported']
    assert imported['layout'] == 'hpm' and imported['teacher'] == 'ema'
    assert imported['untrained'] == [] and imported['epoch'] == 799
    assert not any(k.startswith('optimizer') for k in saved)
    if arch is TINY:  # a stopped rerun keeps the earlier pair
        pair = [out, tmp_path / 'hpm_imported.py']
        rewrite_is_whole(pair, lambda: import_(src, out, *extra))
        rewrite_is_whole(pair, lambda: import_(src, out, *extra),
                         signal.SIGINT)


@pytest.mark.parametrize('layout', ['mae_pretrain', 'mae_visualize'])
def test_mae_official_files_import_with_a_fresh_predictor(tmp_path, layout):
    ref = AuthorsMAE(
        **TINY, decoder=layout == 'mae_visualize', predictor=False).eval()
    src = save_authors(tmp_path / f'{layout}_vit_tiny.pth', ref, layout)
    out = tmp_path / 'mae.pth'
    proc = import_(src, out, '--num-heads', '4', '--decoder-num-heads', '2')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = proc.stdout + proc.stderr
    assert 'untrained (freshly initialised, seed 0): ' in log and \
        'neck.predictor.' in log
    saved = torch.load(out, map_location='cpu', weights_only=False)
    untrained = saved['meta']['imported']['untrained']
    assert 'neck.predictor.' in untrained
    assert ('neck.decoder_blocks.' in untrained) == (layout == 'mae_pretrain')
    # MAE's released models reconstruct normalised pixels
    assert 'norm_pix=True' in (tmp_path / 'mae.py').read_text().replace(
        ' ', '')
    compare(
        ref,
        str(tmp_path / 'mae.py'),
        str(out),
        TINY['img'],
        decoder=layout == 'mae_visualize',
        predictor=False)
    # the pictures refuse a model whose loss predictor is untrained
    from hpm_mm.apis import hard_patches
    with pytest.raises(HPMError, match='has no trained loss predictor'):
        hard_patches(str(tmp_path / 'mae.py'), str(out), str(tmp_path / 'p'))
    assert not (tmp_path / 'p').exists()


def _beit(ref):
    state = ref.state_dict()
    state['blocks.0.gamma_1'] = torch.ones(96)
    state['rel_pos_bias.relative_position_bias_table'] = torch.zeros(4, 4)
    return state


@pytest.mark.parametrize('case,says', [
    ('beit', 'holds keys no MAE/HPM ViT has'),
    ('half_wrapped', "no MAE/HPM ViT has, e.g. ['module."),
    ('finetuned', 'a fine-tuned classifier (head / fc_norm)'),
    ('truncated', 'truncated, damaged or not a torch checkpoint'),
    ('no_vit', 'another shape (e.g. pos_embed: (1, 18, 96) in the file'),
    ('cls_only', 'another shape (e.g. pos_embed: (1, 1, 96) in the file'),
    ('hpm_mm', 'it is an hpm_mm (mmengine) checkpoint already'),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path, case, says):
    ref = AuthorsMAE(**TINY)
    src = tmp_path / 'in.pth'
    state = ref.state_dict()
    if case == 'beit':
        state = _beit(ref)
    elif case == 'finetuned':
        state = {k: v for k, v in state.items() if not k.startswith('decoder')}
        state.update({
            'fc_norm.weight': torch.ones(96),
            'head.weight': torch.zeros(10, 96)
        })
    elif case == 'no_vit':
        state['pos_embed'] = torch.zeros(1, 18, 96)  # 17 patches
    elif case == 'cls_only':  # the cls token's position alone: no patch
        state['pos_embed'] = torch.zeros(1, 1, 96)
    elif case == 'hpm_mm':
        state = {'backbone.' + k: v for k, v in state.items()}
    elif case == 'half_wrapped':  # (all under module.: unwrapped)
        state = {
            ('module.' + k if i % 2 else k): v
            for i, (k, v) in enumerate(state.items())
        }
    torch.save(
        dict(model=state) if case != 'hpm_mm' else dict(state_dict=state), src)
    if case == 'truncated':
        data = src.read_bytes()
        src.write_bytes(data[:len(data) // 2])
    out = tmp_path / 'out.pth'
    proc = import_(src, out, '--num-heads', '4', '--decoder-num-heads', '2')
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert sorted(os.listdir(tmp_path)) == ['in.pth']


HEADS = ('--num-heads', '4', '--decoder-num-heads', '2')


def _refused(tmp_path, src, out, *extra, says):
    """The import of ``src`` into ``out``: one line holding ``says``, exit
    1, the folder as it was."""
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)
              if (tmp_path / n).is_file()}  # yapf: disable
    proc = import_(src, out, *extra)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and says in lines[0], \
        proc.stdout + proc.stderr
    assert before == {n: (tmp_path / n).read_bytes()
                      for n in os.listdir(tmp_path)
                      if (tmp_path / n).is_file()}  # yapf: disable
    return lines[0]


@pytest.mark.parametrize('case,says', [
    ('proj', 'does not fit the model: 1 of its 66 tensors are missing '
     '(e.g. blocks.1.attn.proj.weight). Fix: the file as released'),
    ('middle_block', '12 of its 78 tensors are missing (e.g. '
     'blocks.1.norm1.weight, '),
    ('losspred_head', '1 of its 66 tensors are missing (e.g. '
     'decoder_pred_losspred.weight)'),
    ('ema_encoder_only', "its EMA entry 'model_ema' does not fit the model: "
     '36 of its 66 tensors are missing (e.g. mask_token, decoder_pos_embed, '
     'decoder_embed.weight)'),
    ('ema_other_shapes', "its EMA entry 'model_ema' does not fit the model: "
     '31 have another shape (e.g. cls_token: (1, 1, 64) in the file, '
     '(1, 1, 96) in the model)'),
    ('ema_deeper', "its EMA entry 'model_ema' does not fit the model: it "
     'holds 12 tensors the model lacks (e.g. blocks.2.norm1.weight, '),
    ('heads', '--num-heads 5 does not divide the 192-d width into heads'),
    ('ema_two', 'holds 2 EMA entries that differ (model_ema, ema)'),
])
def test_every_tensor_is_accounted_for(tmp_path, case, says):
    """Every tensor of the model, names and shapes, EMA entries as the
    model: a file without one (a projection, a middle block, the loss
    predictor's head), an EMA entry of the encoder only or of another
    model, heads that do not divide the width: one line naming it before
    anything is written (they imported with exit 0, those tensors random
    and ``untrained`` empty; the EMA teacher half the student's; or were
    tracebacks of 65-578 lines)."""
    arch = dict(TINY, depth=3) if case == 'middle_block' else \
        dict(TINY, dim=192, heads=3) if case == 'heads' else TINY
    state = AuthorsMAE(**arch).state_dict()
    drop = dict(
        proj='blocks.1.attn.proj.weight',
        middle_block='blocks.1.',
        losspred_head='decoder_pred_losspred.weight').get(case, '-')
    ckpt = dict(model={k: v for k, v in state.items()
                       if not k.startswith(drop)})  # yapf: disable
    if case == 'ema_two':  # (model_ema was taken, the other unsaid)
        ckpt['ema'] = AuthorsMAE(**TINY, seed=6).state_dict()
    if case.startswith('ema'):
        ckpt['model_ema'] = AuthorsMAE(
            **dict(
                TINY,
                dim=64 if case == 'ema_other_shapes' else 96,
                depth=3 if case == 'ema_deeper' else 2),
            decoder=case != 'ema_encoder_only',
            predictor=case != 'ema_encoder_only').state_dict()
    torch.save(ckpt, tmp_path / 'in.pth')
    extra = ('--num-heads', '5', *HEADS[2:]) if case == 'heads' else HEADS
    line = _refused(
        tmp_path, tmp_path / 'in.pth', tmp_path / 'out.pth', *extra, says=says)
    if case.startswith('ema'):  # the fix it names imports the rest
        assert 'Fix: --no-ema' in line
        proc = import_(tmp_path / 'in.pth', tmp_path / 'out.pth', *HEADS,
                       '--no-ema')
        assert proc.returncode == 0, proc.stderr
        assert 'teacher = the same weights (--no-ema)' in proc.stdout
        saved = torch.load(tmp_path / 'out.pth', weights_only=True)
        assert saved['meta']['imported']['teacher'] == 'student'
    if case == 'ema_two':  # two equal entries: the one teacher
        ckpt['ema'] = ckpt['model_ema']
        torch.save(ckpt, tmp_path / 'in.pth')
        proc = import_(tmp_path / 'in.pth', tmp_path / 'out.pth', *HEADS)
        assert proc.returncode == 0, proc.stderr
        assert "teacher = the EMA weights ('model_ema')" in proc.stdout


def test_a_ddp_module_prefix_is_unwrapped(tmp_path):
    """A file saved from a DDP-wrapped model (and timm's EMA), its keys
    under ``module.``: imported as the bare one, teacher = its EMA (it was
    refused as "another method (BEiT, SimMIM, ...?)")."""
    ref, ema = AuthorsMAE(**TINY).eval(), AuthorsMAE(**TINY, seed=5).eval()
    wrapped = {
        entry: {
            'module.' + k: v
            for k, v in m.state_dict().items()
        }
        for entry, m in (('model', ref), ('model_ema', ema))
    }
    torch.save(wrapped, tmp_path / 'ddp.pth')
    proc = import_(tmp_path / 'ddp.pth', tmp_path / 'out.pth', *HEADS)
    assert proc.returncode == 0, proc.stderr
    compare(ref, str(tmp_path / 'out.py'), str(tmp_path / 'out.pth'), 32)
    from hpm_mm.apis import load_model
    teacher = load_model(
        str(tmp_path / 'out.py'),
        str(tmp_path / 'out.pth'),
        teacher=True,
        required=('backbone.', 'neck.'))
    x, none = torch.randn(1, 3, 32, 32), torch.zeros(1, 16, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(
            teacher.backbone(x, none.float(), 16)[0],
            ema.forward_encoder(x, none),
            atol=1e-5,
            rtol=1e-5)


def test_an_import_prints_its_own_lines_and_repeats_exactly(tmp_path, warm):
    """The import's console is its two lines (mmengine's line per
    initialised tensor, ~530 of them, kept out); two imports of one MAE
    file are equal tensor for tensor (its fresh loss predictor drawn from
    a fixed seed, named in the line and in ``meta.imported``; two imports
    differed)."""
    ref = AuthorsMAE(**TINY, predictor=False)
    src = save_authors(tmp_path / 'mae_visualize_vit_t.pth', ref,
                       'mae_visualize')
    states = []
    for out in ('a.pth', 'b.pth'):
        proc = process(
            'tools/model_converters/official2hpm.py',
            src,
            tmp_path / out,
            *HEADS,
            python=warm)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 0 and len(lines) == 2, lines[:5]
        assert 'untrained (freshly initialised, seed 0): neck.predictor.' \
            in lines[0] and lines[1].startswith('wrote ')
        saved = torch.load(tmp_path / out, weights_only=True)
        assert saved['meta']['imported']['untrained'] == ['neck.predictor.']
        states.append(saved['state_dict'])
    a, b = states
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _sha(path):
    return hashlib.sha256(open(path, 'rb').read()).hexdigest()


def test_the_outputs_never_overwrite_an_input_or_a_users_file(tmp_path):
    """OUT.pth and OUT.py are checked as a set before any work: OUT is SRC
    (by its path, another spelling, a link), OUT.py is the user's own config
    (no hpm_mm mark), OUT ends in .py, or its folder takes no file (root on
    /proc): one line, nothing written (SRC SRC overwrote the authors' file;
    the user's config was overwritten; OUT.py was both files; /proc was a
    traceback after the work). What hpm_mm wrote is rewritten."""
    src = save_authors(tmp_path / 'in.pth', AuthorsMAE(**TINY), model='x')
    sha = _sha(src)
    os.symlink(src, tmp_path / 'link.pth')
    os.mkdir(tmp_path / 'a')
    for out in (src, tmp_path / 'a' / '..' / 'in.pth', tmp_path / 'link.pth'):
        _refused(tmp_path, src, out, *HEADS, says='is the input')
    assert _sha(src) == sha
    _refused(
        tmp_path,
        src,
        tmp_path / 'cfg.py',
        *HEADS,
        says='two of its outputs would be one file')
    _refused(tmp_path, src, '/proc/hpm_mm.pth', *HEADS, says='not writable')
    (tmp_path / 'mine.py').write_text("_base_ = 'mine_base.py'\n")
    _refused(
        tmp_path,
        src,
        tmp_path / 'mine.pth',
        *HEADS,
        says='mine.py exists and hpm_mm did not write it')
    proc = import_(src, tmp_path / 'ok.pth', *HEADS)
    assert proc.returncode == 0 and import_(src, tmp_path / 'ok.pth', *
                                            HEADS).returncode == 0


def test_a_stop_leaves_the_earlier_pair_and_no_part_file(tmp_path, warm):
    """Ctrl-C, and SIGTERM (whose default kills without cleanup), half-way
    through the save: the earlier OUT.pth and OUT.py as they were, no part
    file (the new OUT.py stood beside the old OUT.pth, and SIGTERM left
    OUT.pth.<pid>.part)."""
    src = save_authors(tmp_path / 'in.pth', AuthorsMAE(**TINY), model='x')
    assert import_(src, tmp_path / 'out.pth', *HEADS).returncode == 0
    src = save_authors(
        tmp_path / 'in2.pth', AuthorsMAE(**dict(TINY, depth=1)), model='x')
    pair = [tmp_path / 'out.pth', tmp_path / 'out.py']
    rewrite_is_whole(pair, lambda: import_(src, pair[0], *HEADS),
                     signal.SIGINT)
    before = {n: _sha(tmp_path / n) for n in ('out.pth', 'out.py')}
    code = ('import os, runpy, signal, sys, torch\n'
            'real = torch.save\n'
            'def stopped(obj, f):\n'
            "    real({'half': torch.zeros(3)}, f)\n"
            '    os.kill(os.getpid(), signal.SIGTERM)\n'
            '    real(obj, f)\n'
            'torch.save = stopped\n'
            'sys.argv = sys.argv[1:]\n'
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    proc = process(
        '-c',
        code,
        'tools/model_converters/official2hpm.py',
        src,
        tmp_path / 'out.pth',
        *HEADS,
        python=warm)
    assert proc.returncode != 0
    assert before == {n: _sha(tmp_path / n) for n in ('out.pth', 'out.py')}
    assert sorted(
        os.listdir(tmp_path)) == ['in.pth', 'in2.pth', 'out.pth', 'out.py']


def test_an_unknown_width_asks_for_its_heads_and_a_missing_folder_refuses(
        tmp_path):
    src = save_authors(tmp_path / 'x.pth', AuthorsMAE(**TINY), model='x')
    proc = import_(src, tmp_path / 'y.pth')
    assert proc.returncode == 1 and '--num-heads N' in proc.stderr
    proc = import_(src, tmp_path / 'no' / 'y.pth', '--num-heads', '4')
    assert proc.returncode == 1 and 'does not exist' in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ['x.pth']


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
    """The tiny authors' HPM file imported: (folder, config, checkpoint,
    the reference model)."""
    tmp = tmp_path_factory.mktemp('official')
    ref = AuthorsMAE(**TINY).eval()
    src = save_authors(tmp / 'checkpoint.pth', ref, model='custom')
    proc = import_(src, tmp / 'hpm.pth', '--num-heads', '4',
                   '--decoder-num-heads', '2')
    assert proc.returncode == 0, proc.stderr
    data = make_image_folder(
        str(tmp / 'imgs'), num_classes=2, per_class=6, gray=False)
    loader = lambda shuffle: dict(  # noqa: E731
        batch_size=4,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=shuffle),
        collate_fn=dict(type='default_collate'),
        dataset=dict(
            type='CustomDataset',
            data_root=data,
            with_label=not shuffle,
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='Resize', scale=32),
                dict(type='PackInputs')
            ]))
    (tmp / 'run.py').write_text(f'''
_base_ = ['hpm.py']
train_dataloader = {dict(loader(True), dataset=dict(
        loader(True)['dataset'], _delete_=True))!r}
custom_hooks = [dict(type='HPMScheduleHook'),
                dict(type='KNNEvalHook', interval=100, ks=[3],
                     train_dataloader={loader(False)!r},
                     val_dataloader={loader(False)!r})]
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=1))
train_cfg = dict(max_epochs=1)
model = dict(teacher=dict(momentum_epochs=1))
param_scheduler = [dict(type='CosineAnnealingLR', by_epoch=True, begin=0,
                        end=1, convert_to_iter_based=True)]
load_from = {str(tmp / 'hpm.pth')!r}
''')
    return tmp, str(tmp / 'run.py'), str(tmp / 'hpm.pth'), ref


def test_an_imported_checkpoint_evaluates_draws_and_continues(imported):
    tmp, config, ckpt, ref = imported
    from hpm_mm.apis import hard_patches, knn_eval
    result = knn_eval(config, ckpt)
    assert 0 <= result['acc'][3] <= 100 and result['num_val'] == 12
    summary = hard_patches(config, ckpt, str(tmp / 'pictures'), num_samples=2)
    assert summary['num_images'] == 2 and len(
        [f for f in os.listdir(tmp / 'pictures') if f.endswith('.png')]) == 2
    log = train(config, tmp / 'work')  # load_from: one epoch, 3 steps
    assert f'Load checkpoint from {ckpt}' in log
    assert (tmp / 'work' / 'epoch_1.pth').is_file()


@pytest.mark.parametrize('target', [
    'mmpretrain', 'timm',
    pytest.param('mmdet', marks=NEEDS_FULL),
    pytest.param('mmseg', marks=NEEDS_FULL)
])
def test_an_imported_checkpoint_converts_to_every_backbone(
        imported, tmp_path, target):
    _, _, ckpt, ref = imported
    out = tmp_path / ('timm_vit' if target == 'timm' else 'backbone.pth')
    proc = tool_main('model_converters/hpm2backbone.py', ckpt, out, '--target',
                     target)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'every tensor of the backbone loaded' in proc.stdout
    if target not in ('mmpretrain', 'timm'):
        return
    # the converted mmpretrain ViT's features are timm's on the encoder
    x = torch.randn(2, 3, 32, 32)
    none = torch.zeros(2, 16, dtype=torch.bool)
    with torch.no_grad():
        want = ref.forward_encoder(x, none)
        if target == 'timm':
            import timm
            model = timm.create_model(f'local-dir:{out}', pretrained=True)
            got = model.eval().forward_features(x)
        else:
            from mmpretrain.models import VisionTransformer
            vit = VisionTransformer(
                arch=dict(
                    embed_dims=96,
                    num_layers=2,
                    num_heads=4,
                    feedforward_channels=384),
                img_size=32,
                patch_size=8,
                out_type='raw',
                final_norm=True)
            state = torch.load(out, map_location='cpu')['state_dict']
            vit.load_state_dict({
                k[len('backbone.'):]: v
                for k, v in state.items()
            })
            vit.eval()  # (mmpretrain's ViT.eval() returns None)
            got = vit(x)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_grayscale_encoder_imports_with_one_channels_values(tmp_path):
    """A 1-channel file imports with an image spec of one channel (the base's
    three ImageNet values had normalised it: its config failed at the first
    use, `pretrain_folder --from` after writing the work dir); 2 channels
    are one line, nothing written."""
    from hpm_mm.apis import load_config
    state = AuthorsMAE(**TINY).state_dict()
    patch = TINY['patch']**2
    for ch in (1, 2):
        gray = dict(state)
        gray['patch_embed.proj.weight'] = state[
            'patch_embed.proj.weight'][:, :ch].clone()
        for name in ('decoder_pred', 'decoder_pred_losspred'):
            for part in ('weight', 'bias'):
                k = f'{name}.{part}'
                gray[k] = state[k][:patch * ch].clone()
        src = tmp_path / f'gray{ch}.pth'
        torch.save(dict(model=gray), src)
        out = tmp_path / f'out{ch}.pth'
        proc = import_(src, out, *HEADS)
        if ch == 2:
            assert proc.returncode == 1 and len(
                proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert '2-channel encoder' in proc.stderr and not out.exists()
            continue
        assert proc.returncode == 0, proc.stderr
        cfg = load_config(str(out)[:-4] + '.py')
        assert cfg.image.channels == 1
        pre = cfg.model.get('data_preprocessor') or cfg.data_preprocessor
        assert (pre.mean, pre.std) == ([114.495], [57.63])
