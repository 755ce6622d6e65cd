"""hpm_mm.apis.test (tools/test.py): evaluation only of checkpoints that
fill the model."""
import pytest
import torch

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.errors import HPMError


def test_test_tool_refuses_a_checkpoint_that_does_not_fill_the_model(
        tmp_path, hpm_checkpoint):
    """A pretraining checkpoint (no classifier head) or a file of random
    tensors is not evaluated as a random model: one line, exit != 0, unless
    --partial-load."""
    from helpers import folder_loader, make_image_folder
    from test_benchmarks import LINEAR
    data = make_image_folder(str(tmp_path / 'val'), 2, 2)
    cfg = tmp_path / 'linear.py'
    cfg.write_text(f'''
_base_ = [{LINEAR!r}]
model = dict(backbone=dict(init_cfg=None))
test_dataloader = {dict(_delete_=True, **folder_loader(data))!r}
''')
    random = tmp_path / 'random.pth'
    torch.save(dict(state_dict={'a': torch.randn(3)}), random)
    from hpm_mm.apis import test
    for ckpt in (hpm_checkpoint, str(random)):
        with pytest.raises(HPMError) as refused:
            test(str(cfg), ckpt, str(tmp_path / 'work'))
        line = str(refused.value)
        assert '\n' not in line and f'{ckpt} does not fill the model' in line
        assert 'head.fc.weight' in line or 'missing' in line
        assert '--partial-load' in line
    metrics = test(
        str(cfg), hpm_checkpoint, str(tmp_path / 'work'), partial_load=True)
    assert 0 <= metrics['accuracy/top1'] <= 100


def test_out_that_cannot_be_written_is_refused_before_the_evaluation(tmp_path):
    """--out in another format, a missing folder, a file the system will
    not create (/proc: root's permissions said yes, and the evaluation died
    after 301 lines) or a folder: refused before the evaluation, by opening
    it; a checked path is left as it was."""
    from hpm_mm.apis.test import check_out
    check_out(str(tmp_path / 'm.json'))
    assert not (tmp_path / 'm.json').exists()
    (tmp_path / 'dir.json').mkdir()
    for path, words in ((tmp_path / 'm.txt', 'unknown format .txt'),
                        (tmp_path / 'no' / 'm.json', 'No such file'),
                        ('/proc/m.json', 'cannot be written'),
                        (tmp_path / 'dir.json', 'Is a directory')):
        with pytest.raises(HPMError, match=words) as refused:
            check_out(str(path))
        assert '\n' not in str(refused.value)
