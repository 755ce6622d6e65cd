"""The one checkpoint loader (hpm_mm.engine.safe_load.load_file): every load
passes ``weights_only=True`` itself, so a code-executing checkpoint is
refused through every public command even with torch's default switched
off (issue #29)."""
import os
import os.path as osp
import pickle
import subprocess
import sys

import pytest
import torch
from helpers import FMNIST_CFG, REPO

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.engine.safe_load import UnsafeCheckpointError, load_file

LINEAR_CFG = osp.join(REPO, 'configs', 'benchmarks', 'classification',
                      'fmnist',
                      'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py')


class Payload:
    """Unpickling it runs code: it writes the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


@pytest.fixture
def hostile(tmp_path):
    """(a checkpoint whose unpickling creates a marker, the marker)."""
    marker = tmp_path / 'code_ran'
    path = tmp_path / 'hostile.pth'
    torch.save(
        dict(
            state_dict={'backbone.x': torch.zeros(1)},
            meta=Payload(str(marker))),
        path,
        pickle_protocol=pickle.DEFAULT_PROTOCOL)
    # the payload ran at save time? (it must not have: save only pickles)
    assert not marker.exists()
    return str(path), marker


def test_load_file_refuses_code_in_one_line(hostile):
    path, marker = hostile
    with pytest.raises(UnsafeCheckpointError, match='refused') as e:
        load_file(path)
    assert 'allow-list' in str(e.value) and '\n' not in str(e.value)
    assert not marker.exists()
    # a plain checkpoint loads
    plain = osp.join(osp.dirname(path), 'plain.pth')
    torch.save(dict(state_dict={'w': torch.ones(2)}), plain)
    assert torch.equal(load_file(plain)['state_dict']['w'], torch.ones(2))


def paths(ckpt, tmp):
    """Every command that loads a checkpoint, given ``ckpt``."""
    init = f'model.backbone.init_cfg.checkpoint={ckpt}'
    return {
        'train --resume': [
            'tools/train.py', FMNIST_CFG, '--work-dir', f'{tmp}/w1',
            '--resume', ckpt
        ],
        'train load_from': [
            'tools/train.py', FMNIST_CFG, '--work-dir', f'{tmp}/w2',
            '--cfg-options', f'load_from={ckpt}'
        ],
        'test.py':
        ['tools/test.py', LINEAR_CFG, ckpt, '--work-dir', f'{tmp}/w3'],
        'knn_eval': ['tools/analysis_tools/knn_eval.py', FMNIST_CFG, ckpt],
        'visualize': [
            'tools/analysis_tools/visualize_hard_patches.py', FMNIST_CFG, ckpt,
            '--out-dir', f'{tmp}/pics'
        ],
        'hpm2backbone': [
            'tools/model_converters/hpm2backbone.py', ckpt, f'{tmp}/out.pth',
            '--target', 'mmpretrain'
        ],
        'target_weights': [
            'tools/model_converters/target_weights.py', 'dino', ckpt,
            f'{tmp}/t.pth'
        ],
        'init_cfg Pretrained': [
            'tools/train.py', LINEAR_CFG, '--work-dir', f'{tmp}/w4',
            '--cfg-options', init
        ],
    }


def test_every_path_refuses_a_code_checkpoint(hostile, tmp_path, monkeypatch):
    """With torch's weights_only default off, none of the 8 commands runs
    the payload; each refuses in its one line: each tool's main in this
    process, and one (train.py) as its own process, its exit status and
    console as a user sees them."""
    from helpers import tool_main
    ckpt, marker = hostile
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    commands = paths(ckpt, tmp_path)
    args = commands.pop('train load_from')
    proc = subprocess.run([sys.executable, *args],
                          cwd=REPO,
                          env=dict(os.environ, PYTHONUNBUFFERED='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    runs = {'train load_from (a process)': proc}
    for name, args in commands.items():
        runs[name] = tool_main(osp.relpath(args[0], 'tools'), *args[1:])
    for name, proc in runs.items():
        out = proc.stdout + proc.stderr
        assert not marker.exists(), f'{name} ran the checkpoint\'s code'
        assert proc.returncode != 0, f'{name} exited 0:\n{out[-2000:]}'
        # the refusal reaches the user as its one line, not a traceback
        assert 'Traceback' not in proc.stderr, f'{name}:\n{proc.stderr}'
        assert 'allow-list' in proc.stderr.strip().splitlines()[-1], \
            f'{name}:\n{out[-3000:]}'


@pytest.fixture
def served(tmp_path):
    """``served(path) -> URL``: files of ``path``'s folder over http from
    127.0.0.1 (a thread of this process), for the test's duration."""
    import functools
    import http.server
    import threading
    servers = []

    def serve(path):
        handler = functools.partial(
            http.server.SimpleHTTPRequestHandler, directory=osp.dirname(path))
        handler.log_message = lambda *a: None
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f'http://127.0.0.1:{server.server_port}/{osp.basename(path)}'

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_every_path_refuses_a_code_checkpoint_from_a_url(
        hostile, tmp_path, served, monkeypatch):
    """The same commands given the checkpoint as an http URL (mmengine's
    URL loader passes weights_only=False): the download is loaded through
    the one loader and refused; a sound checkpoint at a URL loads."""
    from helpers import tool_main
    from mmengine.runner.checkpoint import CheckpointLoader

    ckpt, marker = hostile
    url = served(ckpt)
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    for name, args in paths(url, tmp_path).items():
        proc = tool_main(osp.relpath(args[0], 'tools'), *args[1:])
        err = proc.stderr
        assert not marker.exists(), f'{name} ran the checkpoint\'s code'
        assert proc.returncode != 0, f'{name} exited 0:\n{err[-2000:]}'
        assert 'allow-list' in err.strip().splitlines()[-1], \
            f'{name}:\n{err[-3000:]}'
    plain = tmp_path / 'served' / 'plain.pth'
    plain.parent.mkdir()
    torch.save(dict(state_dict={'w': torch.ones(2)}), plain)
    os.environ['TORCH_HOME'], home = str(tmp_path /
                                         'th'), os.environ.get('TORCH_HOME')
    try:
        got = CheckpointLoader.load_checkpoint(served(str(plain)))
        assert torch.equal(got['state_dict']['w'], torch.ones(2))
    finally:
        if home is None:
            os.environ.pop('TORCH_HOME')
        else:
            os.environ['TORCH_HOME'] = home


@pytest.mark.parametrize('module',
                         ['numpy.core.multiarray', 'numpy._core.multiarray'])
def test_numpy_in_a_checkpoint_loads_from_either_numpy(tmp_path, module):
    """mmengine's buffers pickle NumPy arrays and scalars, named by the
    module of the NumPy that wrote them (``numpy.core`` in 1.x,
    ``numpy._core`` in 2.x). Both names load with ``weights_only=True``:
    a checkpoint written here (NumPy 1) resumes on a GPU image with NumPy
    2 and the other way round; nothing else is allowed on the way."""
    import pickle

    import numpy as np
    obj = dict(arr=np.arange(3.), scalar=np.float64(2.5))
    path = tmp_path / 'ckpt.pth'
    # torch's legacy format: a protocol-2 pickle whose GLOBAL opcodes name
    # 'module\nname\n' in plain bytes, renamed here to ``module``
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    raw = path.read_bytes()
    for written in (b'numpy.core.multiarray', b'numpy._core.multiarray'):
        raw = raw.replace(written + b'\n', module.encode() + b'\n')
    assert module.encode() + b'\n_reconstruct' in raw
    path.write_bytes(raw)
    got = torch.load(path, weights_only=True)
    assert np.array_equal(got['arr'], obj['arr'])
    assert got['scalar'] == 2.5
    # the allow-list stays narrow: another NumPy global is refused
    torch.save(dict(f=np.save), path, _use_new_zipfile_serialization=False)
    with pytest.raises(pickle.UnpicklingError, match='Unsupported global'):
        torch.load(path, weights_only=True)


def test_url_checkpoints_are_cached_by_their_whole_address(tmp_path):
    """Two runs' epoch_3.pth are two copies; a download that is no
    checkpoint (an error page, a cut transfer) is removed and named with
    its URL; a bad copy left in the cache is fetched again."""
    from hpm_mm.engine.download import download_checkpoint
    from hpm_mm.errors import HPMError
    for run, value in (('runA', 1.), ('runB', 2.)):
        (tmp_path / run).mkdir()
        torch.save(
            dict(w=torch.full((2, ), value)), tmp_path / run / 'epoch_3.pth')
    cache = str(tmp_path / 'cache')
    a = download_checkpoint((tmp_path / 'runA' / 'epoch_3.pth').as_uri(),
                            cache)
    b = download_checkpoint((tmp_path / 'runB' / 'epoch_3.pth').as_uri(),
                            cache)
    assert a != b and a.endswith('-epoch_3.pth')
    assert torch.load(a)['w'][0] == 1. and torch.load(b)['w'][0] == 2.
    page = tmp_path / 'moved' / 'epoch_3.pth'
    page.parent.mkdir()
    page.write_text('<html>404 Not Found</html>')
    with pytest.raises(HPMError) as e:
        download_checkpoint(page.as_uri(), cache)
    line = str(e.value)
    assert page.as_uri() in line and 'not a checkpoint' in line and \
        'Fix:' in line and len(line.splitlines()) == 1
    assert sorted(n for n in os.listdir(cache) if n.endswith('.pth')) == \
        sorted([os.path.basename(a), os.path.basename(b)])  # nothing of it
    with open(a, 'r+b') as f:  # the cached copy cut short
        f.truncate(100)
    again = download_checkpoint((tmp_path / 'runA' / 'epoch_3.pth').as_uri(),
                                cache)
    assert again == a and torch.load(again)['w'][0] == 1.


def _member_offset(path: str, suffix: str) -> int:
    """Where the data of the zip member ending in ``suffix`` starts."""
    import struct
    import zipfile
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    with open(path, 'rb') as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack('<HH', f.read(4))
    return info.header_offset + 30 + name_len + extra_len


def test_a_damaged_checkpoint_is_one_line_naming_it(tmp_path, hpm_checkpoint):
    """A checkpoint cut short or with a flipped byte in its pickle, given to
    load_from, kNN, the pictures or the converters: one line naming the
    file and why (it was an OSError or a UnicodeDecodeError naming none)."""
    import re

    from helpers import tiny_config, tool_main, train

    from hpm_mm.apis import hard_patches, knn_eval, load_model
    from hpm_mm.errors import HPMError
    data = open(hpm_checkpoint, 'rb').read()
    cut = tmp_path / 'cut.pth'
    cut.write_bytes(data[:len(data) // 2])
    flipped = bytearray(data)
    start = _member_offset(hpm_checkpoint, 'data.pkl')
    flipped[start + 2:start + 40] = b'\xff' * 38
    flip = tmp_path / 'flip.pth'
    flip.write_bytes(bytes(flipped))
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    for bad in (cut, flip):
        says = f'cannot load the checkpoint {bad}: '
        for run in (lambda: load_model(FMNIST_CFG, str(bad)),
                    lambda: knn_eval(FMNIST_CFG, str(bad)),
                    lambda: hard_patches(FMNIST_CFG, str(
                        bad), str(tmp_path / 'pics')), lambda: train(
                            cfg,
                            tmp_path / f'w_{bad.stem}',
                            cfg_options=dict(load_from=str(bad)))):
            with pytest.raises(HPMError, match=re.escape(says)) as refused:
                run()
            assert '\n' not in str(refused.value)
        for args in ([
                'model_converters/hpm2backbone.py', bad, tmp_path / 'o.pth',
                '--target', 'mmpretrain'
        ], [
                'model_converters/target_weights.py', 'dino', bad,
                tmp_path / 't.pth'
        ]):
            proc = tool_main(*args)
            assert proc.returncode == 1 and says in proc.stderr.strip(
            ).splitlines()[-1], proc.stderr[-2000:]


def test_a_checkpoint_re_saved_by_its_user_loads(tmp_path, hpm_checkpoint):
    """``torch.load(weights_only=False)`` then ``torch.save`` (how a user
    strips or edits one, and what the code refusal advises): its message
    hub's history buffers are data, and it loads through the allow-list
    (issue #58 reported it refused; not reproduced on this torch: pinned)."""
    ckpt = torch.load(hpm_checkpoint, map_location='cpu', weights_only=False)
    path = tmp_path / 're_saved.pth'
    torch.save(ckpt, path)
    again = load_file(str(path))
    assert again['message_hub'].keys() == ckpt['message_hub'].keys()
    for k, v in ckpt['state_dict'].items():
        assert torch.equal(again['state_dict'][k], v), k


def test_a_flipped_bit_in_a_tensor_is_refused_on_every_path(
        tmp_path, hpm_checkpoint):
    """One flipped bit inside a weight (a zip member's CRC fails; torch's
    reader does not check it): every load path names the file and the
    member in one line (kNN, the pictures, load_model and load_from used it
    with exit 0; the converters wrote the bad value out)."""
    from helpers import tiny_config, tool_main, train

    from hpm_mm.apis import hard_patches, knn_eval, load_model
    from hpm_mm.errors import HPMError
    data = bytearray(open(hpm_checkpoint, 'rb').read())
    start = _member_offset(hpm_checkpoint, '/data/0')
    data[start + 1] ^= 0x40
    bad = tmp_path / 'bit.pth'
    bad.write_bytes(bytes(data))
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    says = f'cannot load the checkpoint {bad}: damaged member '
    for run in (
            lambda: load_model(FMNIST_CFG, str(bad)),
            lambda: knn_eval(FMNIST_CFG, str(bad)),
            lambda: hard_patches(FMNIST_CFG, str(bad), str(tmp_path / 'p')),
            lambda: train(
                cfg, tmp_path / 'w', cfg_options=dict(load_from=str(bad)))):
        with pytest.raises(HPMError, match=says) as refused:
            run()
        assert '\n' not in str(refused.value)
    proc = tool_main('model_converters/hpm2backbone.py', bad,
                     tmp_path / 'o.pth', '--target', 'mmpretrain')
    assert proc.returncode == 1 and says in proc.stderr
    assert not (tmp_path / 'o.pth').exists()


def _plain_resave(src, dst, payload=None, legacy=False):
    """``src`` loaded and saved by a plain ``import torch`` process (its
    HistoryBuffers pickled with getattr), with ``payload`` (a marker path)
    a hostile object beside them: unpickling it creates the marker;
    ``legacy``: in torch's pre-zip format."""
    code = ('import os, sys, torch\n'
            'class P:\n'
            '    def __reduce__(self):\n'
            '        return (os.system, ("touch " + sys.argv[3],))\n'
            'ckpt = torch.load(sys.argv[1], weights_only=False)\n'
            'if sys.argv[3] != "-":\n'
            '    ckpt["meta"]["payload"] = P()\n'
            'torch.save(ckpt, sys.argv[2],\n'
            '           _use_new_zipfile_serialization=sys.argv[4] == "0")\n')
    subprocess.run([
        sys.executable, '-c', code, src,
        str(dst),
        str(payload or '-'),
        str(int(legacy))
    ],
                   check=True)


def test_a_checkpoint_re_saved_without_hpm_mm_is_refused_with_the_reason(
        tmp_path, hpm_checkpoint):
    """Re-saved in a plain ``import torch`` process (its HistoryBuffers
    pickled with getattr, nothing else): refused naming that and an hpm_mm
    command that re-saves it (loading it weights-only with getattr alone
    added), which, run as printed, makes it load."""
    from helpers import rewrite_is_whole, tool_main
    resaved = tmp_path / 'resaved.pth'
    _plain_resave(hpm_checkpoint, resaved)
    with pytest.raises(
            UnsafeCheckpointError,
            match='saved by a process without hpm_mm imported') as e:
        load_file(str(resaved))
    line = str(e.value)
    assert 'weights_only=False' not in line and '\n' not in line
    fix = line.split('Fix: if you trust it, re-save it: ')[1].split(' (')[0]
    assert fix == 'python tools/misc/resave_checkpoint.py PATH'
    rewrite_is_whole(  # stopped: the file as it was
        resaved, lambda: tool_main('misc/resave_checkpoint.py', resaved))
    proc = tool_main('misc/resave_checkpoint.py', resaved)  # the fix
    assert proc.returncode == 0, proc.stderr
    assert load_file(str(resaved))['state_dict'].keys() == \
        torch.load(hpm_checkpoint)['state_dict'].keys()


def test_a_hostile_file_beside_history_buffers_is_named_and_never_run(
        tmp_path, hpm_checkpoint):
    """HistoryBuffers pickled by plain torch and a payload (os.system): the
    refusal names every global outside the allow-list (the payload's too),
    is no 're-save' advice, and the re-save command, run on it all the
    same, refuses without loading it: the payload never runs."""
    from helpers import tool_main
    marker, hostile = tmp_path / 'ran', tmp_path / 'hostile.pth'
    _plain_resave(hpm_checkpoint, hostile, marker)
    with pytest.raises(UnsafeCheckpointError) as e:
        load_file(str(hostile))
    line = str(e.value)
    assert 'posix.system' in line and 'builtins.getattr' in line, line
    assert 'HistoryBuffers' not in line and 'resave' not in line
    assert 'weights_only=False' not in line
    proc = tool_main('misc/resave_checkpoint.py', hostile)
    assert proc.returncode == 1 and 'posix.system' in proc.stderr
    assert 'outside the checkpoint allow-list' in proc.stderr
    assert not marker.exists()


class System:
    """Unpickling it runs ``os.system`` (``posix.system``): it creates the
    marker."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


@pytest.mark.parametrize('where', ['object', 'system info', 'protocol 4'])
def test_a_hostile_legacy_file_is_refused_naming_its_global(tmp_path, where):
    """torch's legacy (pre-zip) format is several pickles in sequence: a
    payload in any of them is named as in a zip's (it was "?"), by every
    door, and never runs."""
    from helpers import tool_main
    marker, path = tmp_path / 'ran', tmp_path / 'legacy.pth'
    state = {'w': torch.ones(2), 'p': System(marker)}
    if where == 'system info':  # the third pickle (torch's own dict)
        state.pop('p')
    torch.save(
        state,
        path,
        _use_new_zipfile_serialization=False,
        pickle_protocol=4 if where == 'protocol 4' else 2)
    if where == 'system info':
        raw = path.read_bytes()
        ends = [i + 1 for i in range(len(raw)) if raw[i:i + 1] == b'.']
        start = ends[1]  # after the magic number's and the protocol's
        end = raw.index(b'.\x80', start) + 1
        path.write_bytes(raw[:start] + pickle.dumps(System(marker), 2) +
                         raw[end:])
    with pytest.raises(UnsafeCheckpointError) as e:
        load_file(str(path))
    line = str(e.value)
    assert 'posix.system' in line and '\n' not in line, line
    assert '?' not in line and 'weights_only=False' not in line
    proc = tool_main('misc/resave_checkpoint.py', path)
    assert proc.returncode == 1 and 'posix.system' in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    'pkl,named',
    [
        (b'(iposix\nsystem\n.', 'posix.system'),  # protocol 0's INST
        (b'\x80\x02\x82\x01.', 'copyreg extension 1'),  # EXT1: a global too
        (b'\x80\x05\x97.', 'Unsupported operand 151'),  # torch's own reason
    ])
def test_a_refusal_names_what_the_pickle_holds(tmp_path, pkl, named):
    """Whatever the pickle holds that torch refuses is named (each was
    "?"), and no printed text advises ``weights_only=False``."""
    import zipfile
    plain, path = tmp_path / 'plain.pth', tmp_path / 'odd.pth'
    torch.save(dict(w=torch.ones(2)), plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, 'w') as dst:
        for info in src.infolist():
            dst.writestr(
                info, pkl if info.filename.endswith('data.pkl') else src.read(
                    info.filename))
    with pytest.raises(UnsafeCheckpointError) as e:
        load_file(str(path))
    line = str(e.value)
    assert f'({named})' in line and '\n' not in line, line
    assert 'weights_only' not in line


def test_a_trusted_legacy_file_re_saved_without_hpm_mm_has_a_working_fix(
        tmp_path, hpm_checkpoint):
    """A legacy-format file whose HistoryBuffers plain torch pickled with
    getattr: refused naming the re-save, which makes it load (in the zip
    format); it was refused with "?" and the re-save found nothing."""
    import zipfile

    from helpers import tool_main
    path = tmp_path / 'legacy.pth'
    _plain_resave(hpm_checkpoint, path, legacy=True)
    assert not zipfile.is_zipfile(path)
    with pytest.raises(
            UnsafeCheckpointError, match='saved by a process without hpm_mm'):
        load_file(str(path))
    proc = tool_main('misc/resave_checkpoint.py', path)
    assert proc.returncode == 0 and 're-saved' in proc.stdout, proc.stderr
    assert zipfile.is_zipfile(path)
    assert load_file(str(path))['state_dict'].keys() == \
        torch.load(hpm_checkpoint)['state_dict'].keys()
    proc = tool_main('misc/resave_checkpoint.py', path)  # nothing to do
    assert proc.returncode == 0 and 'as it is' in proc.stdout


@pytest.mark.parametrize('case,says', [
    ('missing', 'no such file'),
    ('folder', 'a folder'),
    ('URL', 'an address, not re-saved (nothing downloaded)'),
    ('cut', 'truncated, damaged or not a torch checkpoint'),
    ('bit', 'damaged member'),
    ('legacy cut', 'cut short or damaged'),
    ('legacy storage cut', 'unexpected EOF'),
    ('hostile legacy', 'outside the checkpoint allow-list (posix.system)'),
])
def test_the_re_save_says_what_it_found(tmp_path, hpm_checkpoint, case, says):
    """``resave_checkpoint.py`` names what it found, one line, exit 1,
    nothing written (it said "holds nothing outside the allow-list" of
    each of these)."""
    from helpers import tool_main
    data = open(hpm_checkpoint, 'rb').read()
    path = tmp_path / 'epoch_1.pth'
    legacy = tmp_path / 'legacy.pth'
    torch.save(
        dict(w=torch.ones(1000), p=System(tmp_path / 'ran'))
        if case == 'hostile legacy' else dict(w=torch.ones(1000)),
        legacy,
        _use_new_zipfile_serialization=False)
    raw = legacy.read_bytes()
    if case == 'folder':
        path.mkdir()
    elif case == 'URL':
        path = 'https://example.com/epoch_1.pth'
    elif case == 'cut':
        path.write_bytes(data[:len(data) // 2])
    elif case == 'bit':
        bad = bytearray(data)
        bad[_member_offset(hpm_checkpoint, '/data/0') + 1] ^= 0x40
        path.write_bytes(bytes(bad))
    elif case != 'missing':
        path.write_bytes(raw[:100] if case == 'legacy cut' else
                         raw[:-10] if case == 'legacy storage cut' else raw)
    before = path.read_bytes() if osp.isfile(path) else None
    proc = tool_main('misc/resave_checkpoint.py', path)
    line = proc.stderr.strip()
    assert proc.returncode == 1 and '\n' not in line, line
    assert says in line and str(path) in line and 'Fix:' in line, line
    assert (path.read_bytes() if osp.isfile(path) else None) == before
    assert not (tmp_path / 'ran').exists()


def test_a_folder_is_no_checkpoint_as_mmengine_said(tmp_path):
    """A folder given as a checkpoint: one line, a FileNotFoundError (an
    OSError) as mmengine's loader raised (it was a CheckpointError only)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    for load in (load_file, CheckpointLoader.load_checkpoint):
        with pytest.raises(FileNotFoundError) as e:
            load(str(tmp_path))
        assert isinstance(e.value, OSError)
        assert f'{tmp_path}: a folder' in str(e.value)
        assert '\n' not in str(e.value)


def test_a_legacy_format_checkpoint_is_not_damaged(tmp_path, hpm_checkpoint):
    """torch's legacy (pre-zip) format has no checksums: it passes the
    integrity check and loads (``--resume`` called it truncated)."""
    from hpm_mm.engine.resume import find_resume_checkpoint
    from hpm_mm.engine.safe_load import checkpoint_problem
    legacy = tmp_path / 'epoch_1.pth'
    torch.save(
        torch.load(hpm_checkpoint),
        legacy,
        _use_new_zipfile_serialization=False)
    assert checkpoint_problem(str(legacy)) is None
    assert find_resume_checkpoint(str(tmp_path)) == (str(legacy), [])
    assert load_file(str(legacy))['meta']['epoch'] == 1


@pytest.mark.parametrize('how', ['overwritten', 'renamed over'])
def test_the_load_check_is_not_fooled_by_a_restored_mtime(
        tmp_path, hpm_checkpoint, how):
    """A checked file replaced in the same process by a damaged copy of the
    same size, its mtime put back with os.utime: checked again and refused
    (the verdict was cached by path, size and mtime, and it loaded a weight
    of -3.3e37)."""
    from hpm_mm.engine.safe_load import CheckpointError, checkpoint_problem
    path = tmp_path / 'epoch_1.pth'
    data = open(hpm_checkpoint, 'rb').read()
    path.write_bytes(data)
    assert checkpoint_problem(str(path)) is None  # checked, and cached
    before = os.stat(path)
    damaged = bytearray(data)
    at = _member_offset(str(path), 'data/0')
    damaged[at:at + 4] = b'\xff\xff\xff\xff'
    while os.stat(path).st_ctime_ns == before.st_ctime_ns or how != \
            'overwritten':  # (the clock's tick after the first write)
        if how == 'overwritten':
            with open(path, 'r+b') as f:
                f.write(bytes(damaged))
        else:
            other = tmp_path / 'other.pth'
            other.write_bytes(bytes(damaged))
            os.replace(other, path)
            break
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size,
                                                  before.st_mtime_ns)
    assert 'CRC' in checkpoint_problem(str(path))
    with pytest.raises(CheckpointError, match='CRC'):
        load_file(str(path))


@pytest.fixture
def server():
    """A server of one checkpoint whose answers the test sets: ``(url,
    state)``; ``state['body']`` is served with ``state['headers']`` (HEAD
    and GET) and ``state['head']`` (HEAD's status, 200 unless set);
    ``state['moved']``: ``/epoch_3.pth`` redirects (302) to that path;
    ``state['down']``: a GET is dropped unanswered (the server gone after
    the HEAD); ``state['gets']`` counts the downloads, ``state['stop']()``
    takes the server off the network."""
    import http.server
    import threading
    state = dict(body=b'', headers={}, gets=0, head=200, moved=None)

    class Handler(http.server.BaseHTTPRequestHandler):

        def _head(self, status=200):
            if state['moved'] and self.path == '/epoch_3.pth':
                self.send_response(302)
                self.send_header('Location', state['moved'])
                self.end_headers()
                return False
            self.send_response(status)
            for k, v in state['headers'].items():
                self.send_header(k, v(state) if callable(v) else v)
            self.end_headers()
            return True

        def do_HEAD(self):
            self._head(state['head'])

        def do_GET(self):
            if state.get('down'):
                self.close_connection = True
                return
            if self._head():
                state['gets'] += 1
                self.wfile.write(state['body'])

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    srv.protocol_version = 'HTTP/1.0'
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def stop():
        srv.shutdown()
        srv.server_close()

    state['stop'] = stop
    yield f'http://127.0.0.1:{srv.server_port}/epoch_3.pth', state
    stop()


def _ckpt_bytes(tmp_path, value):
    path = tmp_path / f'w{value}.pth'
    torch.save(dict(w=torch.full((4, ), float(value))), path)
    return path.read_bytes()


def _length(state):
    return str(len(state['body']))


def _said(run):
    """What ``run()`` logs through the current MMLogger: (level, line)s."""
    import logging

    from mmengine.logging import MMLogger
    said, handler = [], logging.Handler()
    handler.emit = lambda r: said.append((r.levelno, r.getMessage()))
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        return run(), said
    finally:
        logger.removeHandler(handler)


OLD_DATE = 'Mon, 02 Nov 2026 10:00:00 GMT'
SIZE = {'Content-Length': _length}


# (the answers to the first download, to the second; reused?)
@pytest.mark.parametrize(
    'first,then,reused',
    [
        ({
            'ETag': '"v1"',
            **SIZE
        }, {
            'ETag': '"v1"',
            **SIZE
        }, True),
        ({
            'ETag': '"v1"',
            **SIZE
        }, {
            'ETag': '"v2"',
            **SIZE
        }, False),
        ({
            'Last-Modified': OLD_DATE,
            **SIZE
        }, {
            'Last-Modified': OLD_DATE,
            **SIZE
        }, False),  # re-published as `cp -p` does: same size, older date
        ({
            'ETag': 'W/"a"',
            'Last-Modified': OLD_DATE,
            **SIZE
        }, {
            'ETag': 'W/"b"',
            'Last-Modified': OLD_DATE,
            **SIZE
        }, False),
        ({
            'ETag': 'W/"a"',
            **SIZE
        }, {
            'ETag': 'W/"a"',
            **SIZE
        }, False),
        ({}, {}, False),
        ({
            'ETag': '"v1"',
            **SIZE
        }, {
            'ETag': '"v1"',
            'head': 405
        }, False),
        ({
            'ETag': '"v1"',
            **SIZE
        }, {
            'ETag': '"v1"',
            'head': 304
        }, False),
        ({
            'ETag': '"v1"',
            'moved': '/v1'
        }, {
            'ETag': '"v2"',
            'moved': '/v2'
        }, False),
        ({
            'ETag': '"v1"',
            'moved': '/v1'
        }, {
            'ETag': '"v1"',
            'moved': '/v1'
        }, True),
    ],
    ids=[
        'strong etag equal', 'strong etag changed', 'same size older date',
        'weak etag changed', 'weak etag equal', 'no validators', 'HEAD 405',
        'HEAD 304', 'redirect moved', 'redirect same'
    ])
def test_a_url_copy_is_reused_only_on_a_strong_etag_equal_to_its_own(
        tmp_path, server, first, then, reused):
    """The copy is reused only when the server's answer to HEAD carries a
    strong ETag equal to the one recorded at its download (no GET then);
    anything else downloads it again with one line why: a re-published
    file of the same size and an older Last-Modified, and a changed weak
    ETag beside a Last-Modified, were reused without proof (issue #101),
    and a HEAD answered 405/304 used the copy as if offline."""
    from hpm_mm.engine.download import download_checkpoint
    url, state = server

    def answer(headers):
        headers = dict(headers)
        state.update(
            head=headers.pop('head', 200),
            moved=headers.pop('moved', None),
            headers=headers)

    answer(first)
    state['body'] = _ckpt_bytes(tmp_path, 1)
    cache = str(tmp_path / 'cache')
    path = download_checkpoint(url, cache)
    assert torch.load(path)['w'][0] == 1 and state['gets'] == 1
    answer(then)
    state['body'] = _ckpt_bytes(tmp_path, 2)  # re-published, same size
    again, said = _said(lambda: download_checkpoint(url, cache))
    assert again == path and state['gets'] == (1 if reused else 2), said
    assert torch.load(again)['w'][0] == (1 if reused else 2)
    assert len(said) == (0 if reused else 1), said
    if not reused:
        assert 'not proven current; downloading it again' in said[0][1]


def test_an_error_page_never_replaces_a_good_copy(tmp_path, server):
    """After a good copy, the server answers a 200 HTML page, then goes
    down between HEAD and GET: each refused in one line saying the copy
    stays (an OSError), the copy untouched."""
    import hpm_mm.engine.download as download
    url, state = server
    state.update(body=_ckpt_bytes(tmp_path, 1), headers={'ETag': '"v1"'})
    cache = str(tmp_path / 'cache')
    path = download.download_checkpoint(url, cache)
    good = open(path, 'rb').read()
    state.update(
        body=b'<html>500 Internal Server Error</html>',
        headers={'ETag': '"v2"'})
    for says, down in (('not a checkpoint', False),
                       ('cannot download the checkpoint', True)):
        state['down'] = down
        with pytest.raises(download.DownloadError) as e:
            download.download_checkpoint(url, cache)
        line = str(e.value)
        assert '\n' not in line and says in line, line
        assert f'the earlier copy {path} stays untouched' in line
        assert open(path, 'rb').read() == good and isinstance(e.value, OSError)
    assert sorted(os.listdir(cache)) == sorted(
        [osp.basename(path), osp.basename(path) + '.json'])


def test_offline_the_copy_is_used_with_a_warning_naming_its_age(
        tmp_path, server):
    """The server unreachable: the copy is used, with a WARNING (a quiet
    console shows it) naming its age; without a copy, one line."""
    import logging

    import hpm_mm.engine.download as download
    url, state = server
    state.update(body=_ckpt_bytes(tmp_path, 1), headers={})
    cache = str(tmp_path / 'cache')
    path = download.download_checkpoint(url, cache)
    three_days = os.stat(path).st_mtime - 3 * 86400 - 60
    os.utime(path, (three_days, three_days))
    state['stop']()
    got, said = _said(lambda: download.download_checkpoint(url, cache))
    assert got == path and state['gets'] == 1
    assert [lvl for lvl, _ in said] == [logging.WARNING], said
    assert 'cannot be reached' in said[0][1] and \
        f'using the copy {path}, downloaded 3.0 days ago' in said[0][1], said
    with pytest.raises(download.DownloadError) as e:
        download.download_checkpoint(url, str(tmp_path / 'empty_cache'))
    line = str(e.value)
    assert '\n' not in line and f'cannot download the checkpoint {url}' in \
        line and 'Fix:' in line, line


def test_a_missing_file_and_a_failed_download_raise_what_mmengine_did(
        tmp_path):
    """With hpm_mm imported, mmengine's loaders keep their names and their
    errors' kinds: a missing local file is a FileNotFoundError (mmpretrain's
    own tests expect it), a failed download an OSError."""
    from mmengine.runner import checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader
    assert checkpoint.load_from_http.__name__ == 'load_from_http'
    with pytest.raises(FileNotFoundError, match='no such file'):
        CheckpointLoader.load_checkpoint(str(tmp_path / 'missing.pth'))
    with pytest.raises(OSError, match='cannot download the checkpoint'):
        CheckpointLoader.load_checkpoint('http://127.0.0.1:9/x.pth')


def test_pretraining_on_a_torch_without_the_allow_list_is_one_line(
        monkeypatch):
    """Below ``TORCH_FLOOR`` a self-supervised model (its checkpoints could
    not be resumed weights-only) is refused at the start; a classifier (the
    transfer side) is not."""
    from hpm_mm.engine import safe_load
    from hpm_mm.errors import HPMError
    monkeypatch.setattr(safe_load, 'torch_below', lambda v: True)
    with pytest.raises(HPMError, match=r'pretraining \(HPM\) needs torch >='):
        safe_load.refuse_old_torch_pretraining(dict(type='HPM'))
    safe_load.refuse_old_torch_pretraining(dict(type='ImageClassifier'))
    monkeypatch.setattr(safe_load, 'torch_below', lambda v: False)
    safe_load.refuse_old_torch_pretraining(dict(type='HPM'))
