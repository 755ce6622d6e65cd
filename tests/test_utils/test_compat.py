"""The upstream patches of hpm_mm.compat keep the numbers they patch."""
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from helpers import NEEDS_FULL, REPO

import hpm_mm  # noqa: F401  (applies the patches)


def test_unbound_qkv_attention_is_bit_identical():
    """hpm_mm's attention (q, k, v unbound) gives exactly the outputs and
    gradients of mmpretrain's own indexing forward, and importing hpm_mm
    leaves mmpretrain's class as it is: only hpm_mm's modules use it."""
    from mmpretrain.models.utils.attention import MultiheadAttention

    from hpm_mm.models.utils import UnbindQKVAttention, unbind_qkv
    assert MultiheadAttention.forward.__module__ == \
        'mmpretrain.models.utils.attention'
    assert UnbindQKVAttention.forward is not MultiheadAttention.forward
    torch.manual_seed(0)
    attn = MultiheadAttention(embed_dims=16, num_heads=4, v_shortcut=False)
    x = torch.randn(3, 7, 16)
    results = []
    for forward in (MultiheadAttention.forward, UnbindQKVAttention.forward):
        attn.zero_grad()
        xi = x.clone().requires_grad_()
        y = forward(attn, xi)
        (y.sin().sum()).backward()
        results.append((y.detach(), xi.grad, attn.qkv.weight.grad.clone()))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    # hpm_mm's ViT, decoder and loss predictor use it; mmpretrain's ViT not
    from helpers import tiny_hpm
    from mmpretrain.models import VisionTransformer
    model = tiny_hpm()
    kinds = {
        type(m)
        for m in model.modules() if isinstance(m, MultiheadAttention)
    }
    assert kinds == {UnbindQKVAttention}
    vit = VisionTransformer(arch='deit-tiny', img_size=32, patch_size=16)
    assert {
        type(m)
        for m in vit.modules() if isinstance(m, MultiheadAttention)
    } == {MultiheadAttention}
    assert unbind_qkv(vit) is vit


DET_CFG = osp.join(REPO, 'configs', 'benchmarks', 'det',
                   'mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py')

SEG_CFG = osp.join(REPO, 'configs', 'benchmarks', 'seg',
                   'upernet_hpm-vit-base-p16_8xb2-amp-80k_ade20k-512x512.py')


# ----------------------------------------------------------- the version check
def test_versions_are_judged_by_the_imported_module(monkeypatch):
    import mmcv

    from hpm_mm.compat import check_versions, distribution_of
    check_versions()  # the pretraining stack
    monkeypatch.setattr(mmcv, '__version__', '9.9.9')
    installer = distribution_of('mmcv')  # mmcv (full), mmcv-lite (pretrain)
    assert installer in ('mmcv', 'mmcv-lite')
    with pytest.raises(
            ImportError,
            match=r'mmcv>=2\.1\.0,<2\.2\.0.*reports 9\.9\.9 '
            rf'\(installed by {installer}\).*install\.sh pretrain'):
        check_versions(['mmcv'])
    assert distribution_of('no_such_module_xyz') == '?'


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
def test_color_jitter_hue_same_under_numpy_2(backend):
    """mmcv's adjust_hue raised OverflowError for every negative hue factor
    under NumPy 2 (the GPU image's), so the BEiT and iBOT recipes
    (ColorJitter hue 0.1 / 0.2) crashed at their first batch there. hpm_mm's
    fix gives NumPy 1's images: the hue shifted by int(f * 255) modulo 256,
    checked against that written out (and, under NumPy 1, mmcv's own)."""
    import cv2
    import mmcv
    from mmcv.image import photometric
    assert mmcv.adjust_hue is photometric.adjust_hue
    assert mmcv.adjust_hue._hpm_cyclic
    original = photometric.adjust_hue.__wrapped__
    numpy_1 = int(np.__version__.split('.')[0]) < 2
    img = np.random.default_rng(0).integers(0, 256, (8, 8, 3), np.uint8)
    hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV_FULL)
    for factor in (-0.5, -0.2, -0.06, -0.003, 0., 0.003, 0.1, 0.5):
        got = mmcv.adjust_hue(img, factor, backend=backend)
        shift = int(factor * 255) % 256
        if backend == 'cv2':
            want = hsv.copy()
            want[..., 0] = (hsv[..., 0].astype(int) + shift) % 256
            want = cv2.cvtColor(want, cv2.COLOR_HSV2BGR_FULL)
            assert np.array_equal(got, want), factor
        if numpy_1:  # exactly mmcv's own result
            assert np.array_equal(got, original(img, factor, backend)), factor
    if not numpy_1:  # the upstream fault the fix is for
        with pytest.raises(OverflowError, match='out of bounds for uint8'):
            original(img, -0.06, backend)
    with pytest.raises(ValueError, match='not in'):
        mmcv.adjust_hue(img, 0.7)


@NEEDS_FULL
@pytest.mark.parametrize('config,what', [(DET_CFG, 'Detection'),
                                         (SEG_CFG, 'Segmentation')])
def test_det_seg_refuse_without_compiled_ops(monkeypatch, config, what):
    """mmcv importable, its ops not (mmcv-lite): hpm_mm still imports, the
    det/seg modules and configs stop in one line naming the fix."""
    from hpm_mm.apis.config import load_config
    from hpm_mm.compat import MissingCompiledOpsError, require_compiled_ops
    from hpm_mm.errors import HPMError
    monkeypatch.setitem(sys.modules, 'mmcv._ext', None)  # import fails
    for name in ('hpm_mm.det', 'hpm_mm.seg'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingCompiledOpsError) as e:
        require_compiled_ops('X')
    msg = str(e.value)
    assert '\n' not in msg and 'mmcv._ext' in msg
    assert msg.endswith('Fix: bash tools/install.sh full')
    with pytest.raises(HPMError) as e:
        load_config(config)
    msg = str(e.value)
    assert '\n' not in msg, msg
    assert msg.startswith(f'{config}: {what}') and \
        'compiled ops' in msg and 'bash tools/install.sh full' in msg


#: what a new process of this environment imports of the stack before
#: ``import hpm_mm`` in the test below, so that only hpm_mm's own changes
#: show (not the registrations of modules hpm_mm merely imports)
SNAPSHOT = r'''
import importlib, json, sys, warnings
for m in ('torch', 'mmcv', 'mmcv.cnn', 'mmcv.image', 'mmengine.runner',
          'mmengine.config', 'mmpretrain.models', 'mmpretrain.datasets',
          'mmpretrain.apis', 'mmpretrain.evaluation'):
    importlib.import_module(m)
import torch
import mmengine.registry as R
from mmengine.config import utils
from mmengine.runner.checkpoint import CheckpointLoader

MODULES = ('mmengine.config.config', 'mmengine.config.utils',
           'mmengine.runner.runner',
           'mmengine.runner.checkpoint', 'mmengine.logging.history_buffer',
           'mmcv', 'mmcv.image', 'mmcv.image.photometric',
           'torch.serialization')


def snap():
    out = {}
    for name in MODULES:
        module = sys.modules[name]
        for k, v in vars(module).items():
            if type(v).__name__ == 'module':
                continue
            out[f'{name}.{k}'] = id(v)
            if isinstance(v, type) and v.__module__ == name:
                out.update({f'{name}.{k}.{a}': id(b)
                            for a, b in vars(v).items()})
    todo = [r for r in vars(R).values() if isinstance(r, R.Registry)]
    while todo:  # the roots and their children (mmpretrain's, hpm_mm's)
        r = todo.pop()
        todo += list(r.children.values())
        out.update({f'registry {r.scope} {r.name} {k}': id(v)
                    for k, v in r.module_dict.items()})
    out.update({f'CheckpointLoader {k}': id(v)
                for k, v in CheckpointLoader._schemes.items()})
    out.update({f'filter {f[1].pattern}': 0 for f in warnings.filters
                if f[1] is not None})
    out.update({'add_safe_globals ' + (g[1] if isinstance(g, tuple) else
                                       f'{g.__module__}.{g.__qualname__}'): 0
                for g in torch.serialization.get_safe_globals()})
    out.update({f'MODULE2PACKAGE {k}': 0 for k in utils.MODULE2PACKAGE})
    return out


before = snap()
import hpm_mm
after = snap()
print(json.dumps(sorted(k for k in after if before.get(k) != after[k])))
'''


def _token(change: str) -> str:
    """What the docs' table must name for one change: a registry entry
    and a safe global by name (`HPMFSDPStrategy`, `argparse.Namespace`)."""
    if change.startswith(('registry ', 'add_safe_globals ')):
        return f'`{change.rpartition(" ")[2]}`'
    if change.startswith('filter '):
        return change[len('filter '):]
    kind = change.split(' ')[0]
    if kind in ('CheckpointLoader', 'MODULE2PACKAGE'):
        return kind
    owner, _, attr = change.rpartition('.')
    private = attr.startswith('_') and not attr.startswith('__')
    return owner.rpartition('.')[2] if private else attr


def _undocumented(changes, table: str) -> list:
    """The changes ``table`` does not name (a backticked `a.*B` pattern
    names every global it matches, as NumPy's dtype classes), and the
    registry entries its ``| entries in mm...`` rows list that nothing
    added."""
    import fnmatch
    import re
    patterns = [p for p in re.findall(r'`([^`]+)`', table) if '*' in p]
    missing = {
        c
        for c in changes if _token(c) not in table and not any(
            fnmatch.fnmatchcase(_token(c).strip('`'), p) for p in patterns)
    }
    added = {c.rpartition(' ')[2] for c in changes if c.startswith('registry')}
    rows = re.findall(r'^\| entries in mm[^|]*', table, re.M)
    listed = {n for row in rows for n in re.findall(r'`([^`]+)`', row)}
    return sorted(missing | {f'(no such entry) {n}' for n in listed - added})


def test_the_table_check_sees_a_new_global_or_entry_by_name():
    """A safe global or a registry entry added without its name in the
    table is caught (a row's word "registries" had covered any), and a
    listed entry nothing adds too."""
    table = ('| `torch.serialization.add_safe_globals`: `argparse.Namespace`, '
             '`numpy.dtypes.*DType` | |\n'
             '| entries in mmengine\'s registries: `HPMRunner`, `Gone` | |\n')
    changes = [
        'add_safe_globals argparse.Namespace',
        'add_safe_globals numpy.dtypes.Float64DType',
        'registry mmengine runner HPMRunner'
    ]
    assert _undocumented(changes, table) == ['(no such entry) Gone']
    changes += [
        'add_safe_globals builtins.getattr',
        'registry mmengine strategy HPMFSDPStrategy'
    ]
    assert _undocumented(changes, table) == [
        '(no such entry) Gone', 'add_safe_globals builtins.getattr',
        'registry mmengine strategy HPMFSDPStrategy'
    ]


def test_what_import_hpm_mm_changes_is_in_the_docs_table():
    """docs/install.md's table of what ``import hpm_mm`` changes names every
    upstream object it changes: the names and attributes of mmengine's,
    mmcv's and torch's modules and classes, mmengine's root registries, its
    checkpoint loaders, the warning filters, torch's safe globals and the
    config packages; hpm_mm/compat.py or __init__.py changing another
    fails here (it was missing the registries, the filters and
    get_installed_path). Registry entries (mmengine's and mmpretrain's)
    and safe globals by name: it missed `argparse.Namespace` and
    `HPMFSDPStrategy` (issue #101)."""
    import json
    import re
    import subprocess
    proc = subprocess.run([sys.executable, '-c', SNAPSHOT],
                          capture_output=True,
                          text=True,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    changes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert 'build_dataloader' in {c.split('.')[-1] for c in changes}
    text = open(osp.join(REPO, 'docs', 'install.md')).read()
    table = re.search(r'## What `import hpm_mm` changes\n(.*?)(\n## |\Z)',
                      text, re.S).group(1)
    unnamed = _undocumented(changes, table)
    assert not unnamed, f'not in docs/install.md\'s table: {unnamed}'


def test_a_packages_model_index_is_read_once(tmp_path):
    """mmengine parses every metafile of a package's model index for each
    ``pkg::`` base; a second config with such bases reads none again and
    resolves them to the same files. A package not found is asked again."""
    from mmengine.config import Config, config, utils
    cfg = osp.join(REPO, 'configs', 'benchmarks', 'classification',
                   'vit-base-p16_8xb128-coslr-100e_in1k.py')
    first = Config.fromfile(cfg)
    misses = utils.load.cache_info().misses
    second = Config.fromfile(cfg)
    assert utils.load.cache_info().misses == misses
    assert first.to_dict() == second.to_dict()
    assert config.is_installed('mmpretrain')
    assert not config.is_installed('no_such_package_here')
    (tmp_path / 'no_such_package_here.py').write_text('')
    sys.path.insert(0, str(tmp_path))  # "installed" meanwhile: found
    try:
        assert config.is_installed('no_such_package_here')
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop('no_such_package_here', None)
