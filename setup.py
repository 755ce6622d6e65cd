"""Install hpm_mm; configs/ and tools/ ship inside the package
(``hpm_mm/.mim``) so that ``_base_ = 'hpm_mm::...'`` and
``mim train hpm_mm ...`` work from an installed copy as well as from the
checkout (the mmpretrain convention)."""
import os
import os.path as osp
import shutil
import sys
from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))


def get_version() -> str:
    scope = {}
    with open(osp.join(HERE, 'hpm_mm', 'version.py')) as f:
        exec(compile(f.read(), 'version.py', 'exec'), scope)
    return scope['__version__']


def parse_requirements(fname: str) -> list:
    reqs = []
    with open(osp.join(HERE, fname)) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line and not line.startswith('-'):
                reqs.append(line)
    return reqs


def add_mim_extension() -> None:
    """Link (editable install) or copy (build) configs/ and tools/ into
    ``hpm_mm/.mim``."""
    if 'develop' in sys.argv or any('editable' in a for a in sys.argv):
        mode = 'symlink'
    elif {'sdist', 'bdist_wheel', 'build', 'install'} & set(sys.argv):
        mode = 'copy'
    else:
        return
    mim_path = osp.join(HERE, 'hpm_mm', '.mim')
    os.makedirs(mim_path, exist_ok=True)
    for name in ('configs', 'tools', 'model-index.yml'):
        src = osp.join(HERE, name)
        dst = osp.join(mim_path, name)
        if not osp.exists(src):
            continue
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if mode == 'symlink':
            os.symlink(osp.relpath(src, mim_path), dst)
        elif osp.isdir(src):
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='hpm_mm',
        version=get_version(),
        description='Hard Patches Mining for Masked Image Modeling '
        '(CVPR 2023) on the OpenMMLab stack',
        long_description=open(osp.join(HERE, 'README.md')).read()
        if osp.exists(osp.join(HERE, 'README.md')) else '',
        long_description_content_type='text/markdown',
        license='Apache License 2.0',
        python_requires='>=3.10, <3.13',
        packages=find_packages(exclude=('configs', 'tools', 'tests')),
        include_package_data=True,
        package_data={'hpm_mm': ['.mim/**/*']},
        # mmcv comes from the profile: mmcv-lite (pure Python) for
        # pretraining, or mmcv with compiled ops for detection/segmentation
        # (tools/install.sh pretrain|full; hpm_mm checks the imported one)
        # torch: any the environment has is kept (pip never replaces it);
        # pretraining needs >= 2.4 (the loader's allow-list) and says so at
        # start, the transfer side runs on 2.1 (docs/install.md). setuptools
        # < 81: mmengine 0.10.7 imports pkg_resources.
        install_requires=['torch>=2.1', 'torchvision', 'setuptools<81'] +
        parse_requirements('requirements/runtime.txt') + [
            r for r in parse_requirements('requirements/mminstall.txt')
            if not r.startswith('mmcv')
        ],
        extras_require={
            'lite': ['mmcv-lite>=2.1.0,<2.2.0'],
            'full': ['mmcv>=2.1.0,<2.2.0'] +
            parse_requirements('requirements/full.txt'),
            'tests':
            parse_requirements('requirements/tests.txt'),
            'optional':
            parse_requirements('requirements/optional.txt'),
        },
        zip_safe=False)
