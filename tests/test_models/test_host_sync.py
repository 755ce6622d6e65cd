"""HPM's training step makes the GPU wait for the host no more often than
MAE's (issue #55.3): counted on any device by the ops that would
synchronise a GPU (:class:`~hpm_mm.testing.host_sync.HostSyncCounter`), and
on CUDA under ``torch.cuda.set_sync_debug_mode('error')``."""
import copy

import pytest
import torch
from helpers import NEEDS_CUDA, tiny_hpm, tiny_mae, tiny_step_setup

from hpm_mm.testing.host_sync import HostSyncCounter


def setup(model, device='cpu'):
    """The step as a CUDA run builds it: AdamW fused (torch's single-tensor
    AdamW on a CPU reads its step counters, host tensors that are no GPU
    sync), clip_grad as the configs, and before each step the progress
    HPMScheduleHook pushes. Returns ``step(inputs=None)`` and the wrapper."""
    optim, data = tiny_step_setup(
        model, device, fused=True, clip_grad=dict(max_norm=5.0))

    def step(inputs=None):
        if hasattr(model, 'set_progress'):  # the teacher scores and follows
            model.set_progress(1.0, 1, optim.step_calls, 2, optim.last_applied)
        batch = dict(data, inputs=data['inputs'] if inputs is None else inputs)
        model.train_step(batch, optim)

    return step, optim, data['inputs']


def test_hpm_and_mae_steps_make_the_host_wait_for_nothing():
    """0 synchronisations inside the step (after the first two: the
    teacher's first copy, the one-time mask check): the non-finite guard's
    flag and the grad norm stay on the device until the logging interval."""
    for model in (tiny_hpm(seed=0), tiny_mae()):
        step, optim, _ = setup(model)
        step(), step()
        with HostSyncCounter(keep_stacks=True) as syncs:
            step()
        where = '\n'.join(stack for _, stack in syncs.calls)
        assert syncs.count == 0, (type(model).__name__, syncs.ops, where)
        assert optim.applied_steps == 3


def test_a_skipped_step_costs_no_sync_and_stays_skipped():
    """A NaN step on the device path: no sync; student and optimizer state
    untouched; the teacher's update for it a no-op; counted when read."""
    model = tiny_hpm(seed=0)
    step, optim, inputs = setup(model)
    step(), step()
    before = copy.deepcopy(
        (model.student().state_dict(), optim.optimizer.state_dict()))
    with HostSyncCounter() as syncs:
        step(inputs * float('nan'))
    assert syncs.count == 0, syncs.ops
    after = (model.student().state_dict(), optim.optimizer.state_dict())
    for k, v in before[0].items():
        assert torch.equal(v, after[0][k]), k
    for i, state in before[1]['state'].items():
        for k, v in state.items():
            assert torch.equal(v, after[1]['state'][i][k]), (i, k)
    teacher = copy.deepcopy(model.teacher.module.state_dict())
    count = int(model.teacher.steps)
    step()  # the teacher follows the skipped step: stays
    for k, v in model.teacher.module.state_dict().items():
        assert torch.equal(v, teacher[k]), k
    assert int(model.teacher.steps) == count
    step()  # and the applied one: moves
    assert int(model.teacher.steps) == count + 1
    assert optim.skipped_steps == 1 and optim.applied_steps == 4


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
    assert fresh.teacher._steps is None  # the loaded count, read next
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
def test_hpm_step_on_cuda_syncs_nowhere():
    """On a GPU the step runs under sync-debug 'error', nothing excepted;
    the guard's flags are read after it."""
    model = tiny_hpm('cuda', seed=0)
    optim, data = tiny_step_setup(
        model, 'cuda', fused=True, clip_grad=dict(max_norm=5.0))
    for i in range(3):  # the first: the teacher's copy, the mask check
        model.set_progress(1.0, 1, optim.step_calls, 2, optim.last_applied)
        if i:
            torch.cuda.set_sync_debug_mode('error')
        try:
            model.train_step(copy.copy(data), optim)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert optim.applied_steps == 3 and optim.skipped_steps == 0
