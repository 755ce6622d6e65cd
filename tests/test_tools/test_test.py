"""tools/test.py: evaluation only of checkpoints that fill the model."""

import torch
from conftest import python

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)


def test_test_tool_refuses_a_checkpoint_that_does_not_fill_the_model(
        tmp_path, hpm_checkpoint):
    """A pretraining checkpoint (no classifier head) or a file of random
    tensors is not evaluated as a random model: one line, exit != 0, unless
    --partial-load."""
    from conftest import make_image_folder
    from test_benchmarks import LINEAR, _folder_loader
    data = make_image_folder(str(tmp_path / 'val'), 2, 2)
    cfg = tmp_path / 'linear.py'
    cfg.write_text(f'''
_base_ = [{LINEAR!r}]
model = dict(backbone=dict(init_cfg=None))
test_dataloader = {dict(_delete_=True, **_folder_loader(data))!r}
''')
    random = tmp_path / 'random.pth'
    torch.save(dict(state_dict={'a': torch.randn(3)}), random)
    for ckpt in (hpm_checkpoint, str(random)):
        proc = python('tools/test.py', str(cfg), ckpt, '--work-dir',
                      str(tmp_path / 'work'))
        assert proc.returncode != 0
        lines = [
            ln for ln in proc.stderr.splitlines()
            if ln.startswith('tools/test.py:')
        ]
        assert len(lines) == 1, proc.stderr[-2000:]
        assert f'{ckpt} does not fill the model' in lines[0]
        assert 'head.fc.weight' in lines[0] or 'missing' in lines[0]
        assert '--partial-load' in lines[0]
    proc = python('tools/test.py', str(cfg), hpm_checkpoint, '--work-dir',
                  str(tmp_path / 'work'), '--partial-load')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'accuracy/top1' in proc.stdout + proc.stderr


def test_out_that_cannot_be_written_is_refused_before_the_evaluation(
        tmp_path, monkeypatch):
    """--out in another format, a missing folder or one this user cannot
    write: refused before the evaluation (mmengine's dump fails after it,
    losing the result). Root writes anywhere, so the permission is faked."""
    import os

    import pytest

    from hpm_mm.apis.test import check_out
    from hpm_mm.errors import HPMError
    check_out(str(tmp_path / 'm.json'))
    for path, words in ((tmp_path / 'm.txt', 'unknown format .txt'),
                        (tmp_path / 'no' / 'm.json', 'does not exist')):
        with pytest.raises(HPMError, match=words):
            check_out(str(path))
    monkeypatch.setattr(os, 'access', lambda path, mode: False)
    with pytest.raises(HPMError, match='cannot be written. Fix: write'):
        check_out(str(tmp_path / 'm.json'))
