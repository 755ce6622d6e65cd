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
