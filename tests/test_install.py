"""The installed stack is the one hpm_mm supports, with compiled ops."""
import os.path as osp
from importlib.metadata import version

import pytest
import torch
from helpers import NEEDS_FULL, REPO

import hpm_mm
from hpm_mm import SUPPORTED, check_versions


@NEEDS_FULL
def test_versions_in_supported_ranges():
    check_versions(list(SUPPORTED))  # all five, mmdet/mmseg included
    assert version('mmcv') == '2.1.0'
    assert int(version('numpy').split('.')[0]) < 2
    assert hpm_mm.__version__


def test_out_of_range_version_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(SUPPORTED, 'mmcv', ('9.0.0', '10.0.0'))
    with pytest.raises(ImportError, match=r'mmcv>=9.0.0,<10.0.0.*2\.1\.0'):
        check_versions(['mmcv'])


@NEEDS_FULL
def test_mmcv_ops_run_on_cpu():
    from mmcv.ops import nms, roi_align
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.],
                          [50., 50., 60., 60.]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    feats = torch.arange(16.).view(1, 1, 4, 4)
    out = roi_align(feats, torch.tensor([[0., 0., 0., 3., 3.]]), (2, 2), 1.0,
                    0, 'avg', True)
    assert out.shape == (1, 1, 2, 2) and torch.isfinite(out).all()


def test_registries():
    from mmpretrain.registry import DATASETS, HOOKS, MODELS, OPTIM_WRAPPERS
    for name in ('HPM', 'HPMViT', 'HPMPretrainDecoder', 'HPMPretrainHead',
                 'HPMRelativeLoss', 'HPMAbsoluteLoss', 'HPMMaskGenerator'):
        assert MODELS.get(name) is not None, name
    assert HOOKS.get('HPMScheduleHook') is not None
    assert DATASETS.get('FashionMNISTSplit') is not None
    assert OPTIM_WRAPPERS.get('AutocastOptimWrapper') is not None


def test_package_scope_config_inheritance():
    """``hpm_mm::`` bases resolve from the installed package."""
    from mmengine.config import Config
    cfg = Config.fromstring(
        "_base_ = 'hpm_mm::hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'\n",
        '.py')
    assert cfg.model.type == 'HPM'


def test_the_hpm_mm_scope_keeps_its_modules_from_being_replaced():
    """A module registered into the hpm_mm scope under a name mmpretrain's
    (or mmengine's) registry already holds would be built by every
    hpm_mm:: config instead: refused in one line, unless force=True."""
    import pytest

    from hpm_mm.registry import MODELS, OPTIM_WRAPPERS

    class HPMMaskGenerator:  # an out-of-tree impostor
        pass

    with pytest.raises(KeyError, match='would be replaced in every hpm_mm::'):
        MODELS.register_module(module=HPMMaskGenerator)
    with pytest.raises(
            KeyError, match=r'OptimWrapper \(mmengine.* would be replaced'):
        OPTIM_WRAPPERS.register_module(name='OptimWrapper', module=object)
    assert MODELS.get('HPMMaskGenerator') is not HPMMaskGenerator


@NEEDS_FULL
def test_the_full_extra_installs_what_mmseg_imports():
    """mmseg 1.2.2 imports ftfy and regex without requiring them: the
    ``[full]`` extra (requirements/full.txt) names both (``pip install -e
    ".[full]"`` gave an mmseg that did not import)."""
    import subprocess
    import sys
    for module in ('ftfy', 'regex'):
        proc = subprocess.run([
            sys.executable, '-c', f'import sys; sys.modules[{module!r}] = '
            'None; import mmseg.models'
        ],
                              capture_output=True,
                              text=True)
        assert proc.returncode != 0 and module in proc.stderr, module
    with open(osp.join(REPO, 'requirements', 'full.txt')) as f:
        listed = {line.split('#')[0].strip() for line in f}
    assert {'ftfy', 'regex'} <= listed


#: what the pretraining parts of hpm_mm may import: the packages a GPU
#: image keeps (tools/install.sh overlay checks them), the overlay's own
#: (requirements/overlay.txt), and the optional ones imported only where a
#: user asks for them (a timm folder, TensorBoard, the pkg_resources hint)
OVERLAY_IMPORTS = {
    'torch', 'torchvision', 'numpy', 'cv2', 'matplotlib', 'yaml', 'rich',
    'einops', 'PIL', 'packaging', 'markdown', 'click', 'zipp', 'mmengine',
    'mmcv', 'mmpretrain', 'addict', 'yapf'
}
OPTIONAL_IMPORTS = {'safetensors', 'tensorboard', 'setuptools'}


def test_pretraining_imports_only_what_the_overlay_environment_has():
    """hpm_mm outside its transfer parts (det/, seg/) runs in an environment
    of its own torch plus the overlay (a GPU image): a module it imports
    beyond those (scipy in the hard-patch grids, once) fails there only
    when the code runs."""
    import ast
    import glob
    import sys
    found = {}
    for path in glob.glob(
            osp.join(REPO, 'hpm_mm', '**', '*.py'), recursive=True):
        if osp.relpath(path, REPO).split(osp.sep)[1] in ('det', 'seg'):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split('.')[0]
                if top not in sys.stdlib_module_names and top != 'hpm_mm':
                    found.setdefault(top, osp.relpath(path, REPO))
    extra = set(found) - OVERLAY_IMPORTS - OPTIONAL_IMPORTS
    assert not extra, {m: found[m] for m in extra}
