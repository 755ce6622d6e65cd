"""Two processes (gloo, CPU) through tools/dist_train.sh equal one process
with the same global batch."""
import os
import subprocess
import sys

import torch
from conftest import FMNIST_CFG, REPO, run_tool, tiny_config

import hpm_mm  # noqa: F401

# alpha 1 -> 1: every masked patch is chosen by the teacher, so masks are a
# function of the weights and the image only (no per-rank random stream
# enters the comparison); a deterministic pipeline; no shuffling; SGD, whose
# step is linear in the gradient (Adam's first steps are ~lr * sign(grad),
# which turns float reduction-order noise on tiny gradients into lr-sized
# differences).
BODY = '''
optim_wrapper = dict(optimizer=dict(_delete_=True, type='SGD', lr=0.05,
                                    momentum=0.9, weight_decay=1e-4))
model = dict(mask_generator=dict(alpha_0=1.0, alpha_T=1.0))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=3)
param_scheduler = []
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=3))
randomness = dict(seed=0, diff_rank_seed=True)
'''
RESIZE = "dict(type='Resize', scale=32)"


def test_two_processes_equal_one(tmp_path):
    one = tiny_config(tmp_path / 'one', FMNIST_CFG, BODY, num_images=12,
                      transform=RESIZE, batch_size=4, shuffle=False)
    two = tiny_config(tmp_path / 'two', FMNIST_CFG, BODY, num_images=12,
                      transform=RESIZE, batch_size=2, shuffle=False)
    run_tool('tools/train.py', one, '--work-dir', str(tmp_path / 'w1'))
    env = dict(os.environ, PYTHON=sys.executable, PORT='29533',
               OMP_NUM_THREADS='1')
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', two, '2', '--work-dir',
         str(tmp_path / 'w2')], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    a = torch.load(tmp_path / 'w1' / 'iter_3.pth', map_location='cpu')
    b = torch.load(tmp_path / 'w2' / 'iter_3.pth', map_location='cpu')
    sa, sb = a['state_dict'], b['state_dict']
    assert sa.keys() == sb.keys()
    # identical weights after 3 steps, up to float32 reduction order
    for k in sa:
        assert torch.allclose(sa[k], sb[k], rtol=1e-4, atol=1e-6), k
    assert int(sb['teacher.steps']) == 3
    # the steps moved the student away from its EMA teacher
    assert not torch.equal(sa['backbone.layers.0.attn.qkv.weight'],
                           sa['teacher.module.backbone.layers.0.attn.qkv.'
                              'weight'])
