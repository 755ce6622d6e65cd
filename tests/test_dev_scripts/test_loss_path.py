"""The loss-path count (issue #57's measure): the traced functions are the
algorithm's own, counted against a brute-force list."""
import os.path as osp
import sys

import torch
from helpers import REPO, tiny_hpm

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import loss_path  # noqa: E402


def test_the_count_is_the_traced_functions_of_the_package(tmp_path):
    import hpm_mm
    package = osp.dirname(osp.realpath(hpm_mm.__file__))
    model = tiny_hpm(seed=0)
    model.train()
    model.set_progress(1.0)
    codes = loss_path.traced_functions(model, torch.randn(2, 1, 16, 16))
    names = {
        c.co_name
        for c in codes if osp.realpath(c.co_filename).startswith(package)
    }
    # the paper's path: the mask choice, the teacher's scores, the losses
    assert {'loss', 'teach', 'predict_scores', 'forward'} <= names
    counted = loss_path.count(codes, package)
    assert counted['functions'] == len({
        c
        for c in codes if osp.realpath(c.co_filename).startswith(package)
        and not c.co_name.startswith('<')
    })
    assert 0 < counted['files'] <= counted['functions'] < counted['lines']
    out = tmp_path / 'path.json'
    result = loss_path.main(['--out', str(out)])
    assert out.exists() and result['HPM']['functions'] > \
        result['MAE']['functions'] > 0
