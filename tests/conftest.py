"""The tests' fixtures; what they share besides is tests/helpers.py."""
import collections
import gc
import os

# Under pytest-xdist (tools/run_tests.sh: one worker per core) every worker
# and every tool it runs uses one torch thread: two workers of torch's
# default threads each would oversubscribe the cores (a cliff, not a slope:
# docs/speed.md). Set before torch is imported, inherited by subprocesses.
if os.environ.get('PYTEST_XDIST_WORKER'):
    os.environ['OMP_NUM_THREADS'] = '1'
    os.environ['MKL_NUM_THREADS'] = '1'

import pytest  # noqa: E402
import torch  # noqa: E402
from helpers import tiny_config  # noqa: E402
from helpers import ARCH, DEVICES, FMNIST_CFG, tiny_hpm, tiny_hpm_cfg, train
from mmengine.config import Config  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        'markers', 'cuda: the CUDA case of a device-parametrised test')


#: seconds of the slowest files (the timeline of `bash tools/run_tests.sh`,
#: summed per file, AVX512-BF16, 2026-11-28): they run first, longest first,
#: so that no worker is left alone with one at the end. xdist's own order
#: (tools/run_tests.sh turns it off) runs the files with the fewest tests
#: last: the offline install, ~100 s alone on one core of two.
SLOW = {
    'test_tools/test_offline_install.py': 172,
    'test_tools/test_train_resume.py': 64,
    'test_tools/test_out_of_tree.py': 60,
    'test_tools/test_ddp.py': 50,
    'test_downstream/test_toolkit_entry_points.py': 39,
    'test_downstream/test_det_seg.py': 35,
    'test_engine/test_runner.py': 25,
    'test_engine/test_checkpoint.py': 25,
    'test_style.py': 24,
    'test_configs.py': 22,
}


def pytest_collection_modifyitems(items):
    """The slow files first (:data:`SLOW`), then the others by their
    number of tests, as xdist's order; each file's tests kept together and
    in order."""

    def file(item):
        return item.nodeid.split('::')[0]

    count = collections.Counter(map(file, items))
    items.sort(key=lambda item:
               (-SLOW.get(file(item)[len('tests/'):], 0), -count[file(item)]))


def pytest_collection_finish(session):
    """What the collection imported (torch, the OpenMMLab stack, the test
    modules: ~0.5 M objects) lives as long as the worker: frozen out of the
    garbage collector's scans. mmengine runs a full collection for each
    dataset it serialises, ~200 a suite: 0.46 s each on average before,
    0.13 s after (docs/speed.md#the-tests)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def default_stop_signals(request):
    """Each test starts with Python's SIGINT / SIGTERM handlers, unblocked:
    the stop tests (write_outputs guards only a process at the defaults)
    must not depend on what an earlier test in the worker left, which
    depends on the order xdist gives, so on speed. A test that leaves
    others is named in a warning."""
    import signal
    import warnings
    stops = {signal.SIGINT: signal.default_int_handler,
             signal.SIGTERM: signal.SIG_DFL}  # yapf: disable
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(stops))
    for sig, handler in stops.items():
        signal.signal(sig, handler)
    yield
    left = [s.name for s, h in stops.items() if signal.getsignal(s) != h]
    left += [
        f'{s.name} blocked'
        for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if s in stops
    ]
    if left:
        warnings.warn(f'{request.node.nodeid} left {left}')


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """The device a model-level test runs on: ``cpu``, and ``cuda`` when
    available (skipped, and counted as skipped, without a GPU). On CUDA,
    TF32 is off in the test (cuDNN allows it for convolutions by default,
    e.g. the patch embedding): the tests compare fp32 results to 1e-5."""
    if request.param == 'cuda':
        matmul, conv = (torch.backends.cuda.matmul.allow_tf32,
                        torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        yield torch.device('cuda')
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv
    else:
        yield torch.device(request.param)


@pytest.fixture(autouse=True)
def default_scope():
    """Every test starts in mmpretrain's registry scope, whatever scope an
    earlier test of the same worker left current (mmdet's, mmseg's)."""
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')


@pytest.fixture(scope='session')
def warm(tmp_path_factory):
    """A warm interpreter (tests/warm_python.py), one per worker: an
    executable taking python's arguments whose commands fork from a process
    that imported the stack once (~5 s saved each). For commands run as
    written whose point is not a start-up of their own."""
    from warm_python import warm_python
    with warm_python(tmp_path_factory.mktemp('warm')) as client:
        yield client


@pytest.fixture(scope='session')
def hpm_checkpoint(tmp_path_factory):
    """Checkpoint of a 2-iteration HPM run of the small config (teacher
    active: alpha 0.5 -> 1)."""
    tmp = tmp_path_factory.mktemp('hpm')
    cfg = tiny_config(
        tmp,
        FMNIST_CFG,
        num_images=8,
        body='train_cfg = dict(max_epochs=1)\n'
        'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))')
    train(cfg, tmp / 'work')
    ckpt = tmp / 'work' / 'epoch_1.pth'
    assert ckpt.exists()
    return str(ckpt)


@pytest.fixture(scope='session')
def rgb_hpm_checkpoint(tmp_path_factory):
    """A randomly initialised RGB HPM (ViT 64-d, 4 blocks, patch 16, 64 px)
    saved the way tools/train.py saves (state_dict + meta.cfg)."""
    rgb = dict(
        img_size=64,
        patch_size=16,
        in_channels=3,
        embed_dims=ARCH['embed_dims'],
        num_layers=ARCH['num_layers'],
        neck=dict(decoder_embed_dim=32))
    model_cfg = tiny_hpm_cfg(**rgb)
    model = tiny_hpm(seed=0, **rgb)
    model.teacher.update(model.student())
    path = tmp_path_factory.mktemp('rgb_hpm') / 'hpm.pth'
    torch.save(
        dict(
            state_dict=model.state_dict(),
            meta=dict(cfg=Config(dict(model=model_cfg)).pretty_text)), path)
    return str(path)
