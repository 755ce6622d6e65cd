"""HPM's training step makes the GPU wait for the host no more often than
MAE's (issue #55.3): counted on any device by the ops that would
synchronise a GPU (:class:`~hpm_mm.testing.host_sync.HostSyncCounter`), and
on CUDA under ``torch.cuda.set_sync_debug_mode('error')``."""
import copy

import pytest
import torch
from helpers import NEEDS_CUDA, tiny_hpm, tiny_mae, tiny_step_setup

from hpm_mm.testing.host_sync import HostSyncCounter


def steps(model, device, n=3, fused=True):
    """Warm-up steps, then the last one's counted syncs. AdamW fused, as a
    CUDA run builds it (torch's single-tensor AdamW on a CPU reads its step
    counters, host tensors that are no GPU sync; the fused one does not)."""
    # the teacher scores: its pass is counted
    optim, data = tiny_step_setup(model, device, fused=fused)
    for _ in range(n - 1):
        model.train_step(copy.copy(data), optim)
    with HostSyncCounter(keep_stacks=True) as syncs:
        model.train_step(copy.copy(data), optim)
    return syncs


def test_hpm_step_syncs_no_more_than_mae():
    hpm = steps(tiny_hpm(seed=0), 'cpu')
    mae = steps(tiny_mae(), 'cpu')
    where = '\n'.join(stack for _, stack in hpm.calls)
    assert hpm.count <= mae.count, (hpm.ops, mae.ops, where)
    # what is left is the non-finite guard's one flag, in both
    assert hpm.count == mae.count == 1, (hpm.ops, where)


def test_counter_sees_what_synchronises():
    x = torch.randn(8)
    with HostSyncCounter() as syncs:
        x.sum().item()
        bool(x.max() > 0)
        x[x > 0]
        torch.nonzero(x)
        x * 2 + 1  # none
    assert syncs.ops == {
        'aten._local_scalar_dense': 2,
        'aten.index': 1,
        'aten.nonzero': 1
    }, syncs.ops


def test_teacher_update_matches_per_parameter_ema():
    """The multi-tensor EMA step gives mmengine's per-parameter one."""
    from mmengine.model import ExponentialMovingAverage
    model = tiny_hpm(seed=0)
    student = model.student()
    ref = ExponentialMovingAverage(student, momentum=model.teacher.momentum)
    for i in range(3):
        for p in student.parameters():
            p.data.add_(0.01 * torch.randn_like(p))
        model.teacher.update(student)
        ref.update_parameters(student)
    assert int(model.teacher.steps) == int(ref.steps) == 3
    for (k, a), (_, b) in zip(model.teacher.module.state_dict().items(),
                              ref.module.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7, msg=k)


def test_teacher_steps_follow_a_loaded_checkpoint():
    model = tiny_hpm(seed=0)
    model.teacher.update(model.student())
    model.teacher.update(model.student())
    state = copy.deepcopy(model.state_dict())
    fresh = tiny_hpm(seed=1)
    fresh.load_state_dict(state)
    assert fresh.teacher._host_steps() == 2  # not a first (copying) update
    before = [p.clone() for p in fresh.teacher.module.parameters()]
    for p in fresh.student().parameters():
        p.data.add_(1.)
    fresh.teacher.update(fresh.student())
    moved = [(a - b).abs().max()
             for a, b in zip(fresh.teacher.module.parameters(), before)]
    assert all(m < 0.01 for m in moved)  # an EMA step, not a copy
    assert int(fresh.teacher.steps) == 3


@pytest.mark.cuda
@NEEDS_CUDA
def test_hpm_step_on_cuda_syncs_only_in_the_guard():
    """On a GPU: the step runs under sync-debug 'error' apart from the
    non-finite guard's one read (the optimizer wrapper's step)."""
    model = tiny_hpm('cuda', seed=0)
    optim, data = tiny_step_setup(model, 'cuda', fused=True)
    model.train_step(copy.copy(data), optim)  # first: teacher's copy, reads
    step = optim.step

    def guard_step(**kwargs):  # the guard's read is allowed
        torch.cuda.set_sync_debug_mode(0)
        try:
            return step(**kwargs)
        finally:
            torch.cuda.set_sync_debug_mode('error')

    optim.step = guard_step
    torch.cuda.set_sync_debug_mode('error')
    try:
        model.train_step(copy.copy(data), optim)
    finally:
        torch.cuda.set_sync_debug_mode(0)
