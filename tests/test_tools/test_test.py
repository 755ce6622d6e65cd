"""hpm_mm.apis.test (tools/test.py): evaluation only of checkpoints that
fill the model."""
import pytest
import torch

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.errors import HPMError


def linear_config(tmp_path):
    """The linear-probe benchmark config on a tiny generated test set."""
    from helpers import folder_loader, make_image_folder
    from test_benchmarks import LINEAR
    data = make_image_folder(str(tmp_path / 'val'), 2, 2)
    cfg = tmp_path / 'linear.py'
    cfg.write_text(f'''
_base_ = [{LINEAR!r}]
model = dict(backbone=dict(init_cfg=None))
test_dataloader = {dict(_delete_=True, **folder_loader(data))!r}
''')
    return cfg


def test_test_tool_refuses_a_checkpoint_that_does_not_fill_the_model(
        tmp_path, hpm_checkpoint):
    """A pretraining checkpoint (no classifier head), a file of random
    tensors or a deeper model's (its first blocks evaluated) is not
    evaluated as a random or cut model: one line, exit != 0, unless
    --partial-load."""
    from mmengine.config import Config

    from hpm_mm.apis import load_model
    cfg = linear_config(tmp_path)
    random = tmp_path / 'random.pth'
    torch.save(dict(state_dict={'a': torch.randn(3)}), random)
    deeper = Config.fromfile(cfg)
    deeper.model.backbone.arch.num_layers += 2
    torch.save(
        dict(state_dict=load_model(deeper).state_dict()),
        tmp_path / 'deeper.pth')
    from hpm_mm.apis import test
    for ckpt, says in ((hpm_checkpoint, 'are missing (e.g. backbone.ln2'),
                       (str(random), 'the file holds e.g. a)'),
                       (str(tmp_path / 'deeper.pth'), 'the model lacks')):
        with pytest.raises(HPMError) as refused:
            test(str(cfg), ckpt, str(tmp_path / 'work'))
        line = str(refused.value)
        assert '\n' not in line and f'{ckpt} does not fit the model' in line
        assert says in line and '--partial-load' in line, line
    metrics = test(
        str(cfg), hpm_checkpoint, str(tmp_path / 'work'), partial_load=True)
    assert 0 <= metrics['accuracy/top1'] <= 100


def test_out_is_planned_before_the_evaluation_and_written_as_a_whole(
        tmp_path, hpm_checkpoint, monkeypatch):
    """--out in another format, in a missing folder, a folder, in a folder
    that takes no file (/proc: root's permissions say yes), the checkpoint
    itself (the json went over it after the evaluation: the old check
    opened the file) or the user's own file: one line before the
    evaluation, each file as it was (a checkpoint.pkl had the metrics
    written over it). The metrics carry hpm_mm's mark, and
    the next run writes over them."""
    import importlib
    import json
    import os
    import shutil

    from hpm_mm import apis
    train = importlib.import_module('hpm_mm.apis.train')  # (not apis.train)
    cfg = linear_config(tmp_path)
    ckpt = str(tmp_path / 'ckpt.pkl')  # (torch.load reads any name)
    shutil.copy(hpm_checkpoint, ckpt)
    (tmp_path / 'link.json').symlink_to(ckpt)
    (tmp_path / 'dir.json').mkdir()
    (tmp_path / 'mine.json').write_text('{"mine": 1}')
    before = {p: open(p, 'rb').read() for p in (ckpt, tmp_path / 'mine.json')}
    build = train.build_runner
    monkeypatch.setattr(train, 'build_runner', None)  # no evaluation
    for path, words in ((tmp_path / 'm.txt', 'unknown format .txt'),
                        (tmp_path / 'no' / 'm.json',
                         'does not exist'), ('/proc/m.json', 'not writable'),
                        (tmp_path / 'dir.json', 'is a folder'),
                        (ckpt, 'is the input'), (tmp_path / 'link.json',
                                                 'is the input'),
                        (tmp_path / 'mine.json', 'hpm_mm did not write it')):
        with pytest.raises(HPMError, match=words) as refused:
            apis.test(
                str(cfg),
                ckpt,
                str(tmp_path / 'w'),
                out=str(path),
                partial_load=True)
        assert '\n' not in str(refused.value)
    assert before == {p: open(p, 'rb').read() for p in before}
    assert sorted(os.listdir(tmp_path / 'dir.json')) == []
    monkeypatch.setattr(train, 'build_runner', build)
    out = tmp_path / 'm.json'
    for _ in range(2):
        metrics = apis.test(
            str(cfg),
            ckpt,
            str(tmp_path / 'w'),
            out=str(out),
            partial_load=True)
        assert json.loads(out.read_text()) == dict(
            metrics, hpm_mm_output='test.py')
    assert [p for p in os.listdir(tmp_path) if 'part' in p] == []
