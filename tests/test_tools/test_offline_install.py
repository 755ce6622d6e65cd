"""The offline install, end to end: build a wheelhouse (network), then
install the pretraining profile into a new environment with the package
index switched off (and any network access failing), check what that
profile can and cannot do (mmcv-lite: hpm_mm imports, detection refuses in
one line), then move the same environment to the full profile (mmcv with
compiled ops replaces mmcv-lite) from the same wheelhouse.

torch is not downloaded (several GB): the new environment sees this one's
torch, torchvision and their dependencies through a ``.pth`` overlay, as a
machine with its own CUDA torch would (``--no-torch`` wheelhouse).
"""
import os
import os.path as osp
import re
import socket
import subprocess
import sys

import pytest
from helpers import REPO

DET_CFG = 'configs/benchmarks/det/mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_' \
    'coco-1024.py'


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(('pypi.org', 443), timeout=5).close()
        return True
    except OSError:
        return False


def _torch_overlay(dest: str, roots=('torch', 'torchvision')) -> None:
    """Symlink ``roots`` (torch, torchvision) and their dependency closure
    (import packages and .dist-info folders) from this environment into
    ``dest``."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    os.makedirs(dest, exist_ok=True)
    todo, seen = [(root, ()) for root in roots], set()
    while todo:
        raw, extras = todo.pop()
        name = canonicalize_name(raw)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(
                    req.marker.evaluate({'extra': e})
                    for e in ('', ) + extras):
                todo.append((req.name, tuple(sorted(req.extras))))
        site = str(dist.locate_file(''))
        for f in dist.files or []:
            top = f.parts[0]
            if top.startswith('..') or top.endswith('.pth') or \
                    top == '__pycache__':
                continue
            link = osp.join(dest, top)
            if not osp.lexists(link):
                os.symlink(osp.join(site, top), link)


def _new_venv(tmp_path, roots=None):
    """A new venv seeing this environment's ``roots`` (and their needs)
    through a ``.pth`` file; its python."""
    venv = tmp_path / 'venv'
    subprocess.run([
        getattr(sys, '_base_executable', sys.executable), '-m', 'venv',
        str(venv)
    ],
                   check=True)
    py = str(venv / 'bin' / 'python')
    if roots:
        site = subprocess.run([
            py, '-c', 'import sysconfig; '
            'print(sysconfig.get_paths()["purelib"])'
        ],
                              check=True,
                              capture_output=True,
                              text=True).stdout.strip()
        _torch_overlay(str(tmp_path / 'overlay'), roots)
        with open(osp.join(site, 'overlay.pth'), 'w') as f:
            f.write(str(tmp_path / 'overlay') + '\n')
    return py


#: the big packages of the full profile that a machine may have already
#: (torch's, OpenCV, SciPy, Matplotlib, TensorBoard): the offline install
#: test's environment sees this one's
OWN = ('torch', 'torchvision', 'opencv-python', 'scipy', 'matplotlib',
       'tensorboard')

# the packages a GPU image keeps (tools/install.sh overlay checks them)
IMAGE = ('torch', 'torchvision', 'numpy', 'opencv-python', 'matplotlib',
         'PyYAML', 'rich', 'einops', 'pillow', 'packaging', 'Markdown',
         'click', 'zipp')


def _offline(**extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(('PIP_', 'VIRTUAL_ENV', 'PYTHONPATH'))
    }
    env.update(
        HPM_SKIP_DATA='1',
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX='1',
        https_proxy='http://127.0.0.1:9',
        http_proxy='http://127.0.0.1:9',
        HTTPS_PROXY='http://127.0.0.1:9',
        HTTP_PROXY='http://127.0.0.1:9',
        **extra)
    return env


def test_overlay_refuses_an_environment_without_its_packages(tmp_path):
    py = _new_venv(tmp_path)
    env = _offline(PATH=f'{osp.dirname(py)}:{os.environ["PATH"]}')
    proc = _run(['bash', 'tools/install.sh', 'overlay'], env)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()
    assert len(last) == 1 and 'lacks: torch torchvision numpy' in last[0] \
        and 'Fix: ' in last[0], proc.stderr


@pytest.fixture(scope='module')
def overlay_wheelhouse(tmp_path_factory):
    """The overlay's wheelhouse, built once (network)."""
    if not _pypi_reachable():
        pytest.skip('building a wheelhouse needs PyPI')
    wheelhouse = tmp_path_factory.mktemp('overlay') / 'overlay_wheels'
    build = _run([
        'bash', '.dev_scripts/build_wheelhouse.sh',
        str(wheelhouse), '--overlay'
    ], dict(os.environ))
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheels = sorted(os.listdir(wheelhouse))
    assert len(wheels) == 15 and all(w.endswith('.whl') for w in wheels)
    assert not any(re.match(r'(torch|numpy|opencv|nvidia)', w) for w in wheels)
    return wheelhouse


#: the build tools the environment holds before the overlay: the new
#: venv's own setuptools (65.5 on Python 3.11.7, no wheel), and the GPU
#: image's (setuptools 80.9 with wheel 0.45.1: pip then took the legacy
#: ``setup.py develop`` path, whose setuptools-80 shim re-ran pip with
#: build isolation, asking the switched-off index for setuptools)
BUILD_TOOLS = dict(venv=(), gpu_image=('setuptools==80.9.0', 'wheel==0.45.1'))


@pytest.mark.parametrize('build_tools', sorted(BUILD_TOOLS))
def test_overlay_onto_an_environment_that_keeps_its_packages(
        tmp_path, overlay_wheelhouse, build_tools):
    """The GPU image's case: an environment with its own torch, NumPy and
    OpenCV gets only the overlay's wheels (offline), keeps every package
    it had, and trains-ready hpm_mm imports (mmcv-lite). With the venv's
    own setuptools (no wheel package) the overlay adds wheel; with the
    image's, hpm_mm's editable install builds offline in the environment."""
    wheelhouse = overlay_wheelhouse
    py = _new_venv(tmp_path, IMAGE)
    if BUILD_TOOLS[build_tools]:  # installed online, as the image has them
        setup = _run(
            [py, '-m', 'pip', 'install', '-q', *BUILD_TOOLS[build_tools]],
            dict(os.environ))
        assert setup.returncode == 0, setup.stderr[-3000:]
    env = _offline(
        HPM_WHEELHOUSE=str(wheelhouse),
        PATH=f'{osp.dirname(py)}:{os.environ["PATH"]}')
    before = _run([py, '-m', 'pip', 'list', '--format=freeze'], env).stdout
    proc = _run(['bash', 'tools/install.sh', 'overlay'], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'nothing of it replaced' in proc.stdout
    needs_wheel = _run([py, '-c', 'import setuptools.command.bdist_wheel'],
                       env).returncode != 0
    assert ('adding wheel==0.45.1' in proc.stdout) == needs_wheel, proc.stdout
    after = _run([py, '-m', 'pip', 'list', '--format=freeze'], env).stdout
    kept = set(before.split()) - set(after.split())
    assert not kept, f'replaced: {kept}'
    assert 'numpy==%s' % __import__('numpy').__version__ in after.split()
    assert [p for p in after.split() if p.startswith('mmcv')] == \
        ['mmcv-lite==2.1.0']
    # hpm_mm imports: install.sh checks it before it says done, and again
    # before it says 'already installed'
    again = _run(['bash', 'tools/install.sh', 'overlay'], env)
    assert again.returncode == 0 and 'already installed (overlay' in \
        again.stdout


def _run(cmd, env, timeout=900):
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout)
    return proc


@pytest.mark.skipif(
    not _pypi_reachable(), reason='building a wheelhouse needs PyPI')
def test_wheelhouse_then_offline_install_both_profiles(tmp_path):
    wheelhouse = tmp_path / 'wheelhouse'
    tag = 'py%d%d-torch%s' % (*sys.version_info[:2],
                              __import__('torch').__version__.replace(
                                  '+', '_'))
    cache = os.environ.get(
        'HPM_WHEEL_CACHE',
        osp.join(
            os.environ.get('XDG_CACHE_HOME', osp.expanduser('~/.cache')),
            'hpm_mm', 'wheels'))
    with_mmcv = bool([
        f for f in os.listdir(osp.join(cache, tag))
        if f.startswith('mmcv-2.1.0-')
    ]) if osp.isdir(osp.join(cache, tag)) else False
    pip_log = tmp_path / 'pip.log'
    build = _run([
        'bash', '.dev_scripts/build_wheelhouse.sh',
        str(wheelhouse), '--profile', 'full', '--no-torch'
    ] + (['--with-mmcv'] if with_mmcv else []),
                 dict(os.environ, PIP_LOG=str(pip_log)))
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheels = os.listdir(wheelhouse)
    assert any(w.startswith('mmcv_lite-2.1.0') for w in wheels)
    assert any(w.startswith('mmdet-3.3.0') for w in wheels)
    assert not any(re.match(r'(torch|nvidia|triton)[-_]', w) for w in wheels)
    # nor did pip download them to read their requirements (~3 GB)
    assert not re.search(r'Downloading (torch|nvidia|triton)',
                         pip_log.read_text())

    # a new environment that sees the machine's own big packages (as a GPU
    # image has them): the profiles install the OpenMMLab stack and the rest
    # from the wheelhouse
    py = _new_venv(tmp_path, OWN)
    venv = tmp_path / 'venv'

    offline = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(('PIP_', 'VIRTUAL_ENV', 'PYTHONPATH'))
    }
    offline.update(
        HPM_VENV=str(venv),
        HPM_WHEELHOUSE=str(wheelhouse),
        HPM_SKIP_DATA='1',
        HPM_WHEEL_CACHE=str(tmp_path / 'no_cache'),
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX='1',
        https_proxy='http://127.0.0.1:9',
        http_proxy='http://127.0.0.1:9',
        HTTPS_PROXY='http://127.0.0.1:9',
        HTTP_PROXY='http://127.0.0.1:9')

    pre = _run(['bash', 'tools/install.sh', 'pretrain'], offline)
    assert pre.returncode == 0, pre.stdout[-3000:] + pre.stderr[-3000:]
    assert 'installing mmcv-lite' in pre.stdout
    # one process: what the profile has, and tools/train.py's main on a
    # detection config (the refusal a user of the profile sees)
    check = _run([
        py, '-c',
        ('import runpy, sys, hpm_mm, mmcv, mmpretrain\n'
         'from hpm_mm.compat import distribution_of\n'
         'print(distribution_of("mmcv"), mmcv.__version__)\n'
         'try:\n'
         '    import hpm_mm.det\n'
         'except RuntimeError as e:\n'
         '    print("REFUSED", e)\n'
         'sys.argv = ["tools/train.py", %r, "--work-dir", %r]\n'
         'runpy.run_path("tools/train.py", run_name="__main__")\n' %
         (DET_CFG, str(tmp_path / 'det')))
    ], offline)
    assert check.returncode == 1, check.stderr[-3000:]
    assert 'mmcv-lite 2.1.0' in check.stdout
    assert 'REFUSED Detection' in check.stdout and \
        'Fix: bash tools/install.sh full' in check.stdout
    last = check.stderr.strip().splitlines()
    assert len(last) == 1 and 'inherits from mmdet, which is not installed. ' \
        'Fix: bash tools/install.sh full' in last[0], check.stderr[-2000:]

    if not with_mmcv:
        pytest.skip(f'no built mmcv wheel for {tag} in {cache}: the full '
                    'profile part needs one (bash tools/install.sh full)')
    full = _run(['bash', 'tools/install.sh', 'full'], offline)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    assert 'replacing mmcv-lite by mmcv' in full.stdout
    check = _run([
        py, '-c',
        ('import importlib.metadata as m, hpm_mm, hpm_mm.det, mmcv.ops, '
         'mmdet, mmseg\n'
         'from hpm_mm.compat import distribution_of\n'
         'print(distribution_of("mmcv"))\n'
         'try:\n'
         '    m.version("mmcv-lite"); print("LITE LEFT")\n'
         'except m.PackageNotFoundError:\n'
         '    print("LITE GONE")\n')
    ], offline)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.split() == ['mmcv', 'LITE', 'GONE']
    # a full install also serves the pretraining profile: nothing to do
    again = _run(['bash', 'tools/install.sh', 'pretrain'], offline)
    assert again.returncode == 0 and 'already installed (full' in \
        again.stdout
