"""The logged scalars read back once per logging interval give the message
hub what mmengine's per-iteration RuntimeInfoHook gives it (issue #55.3)."""
import pytest
import torch
from helpers import TINY_RUN, tiny_config

from hpm_mm.engine.hooks import DeferredRuntimeInfoHook
from hpm_mm.testing.host_sync import HostSyncCounter


def _history(runner) -> dict:
    return {
        k: list(buf.data[0])
        for k, buf in runner.message_hub.log_scalars.items()
        if k.startswith('train/') and k not in ('train/time',
                                                'train/data_time')
    }


def test_same_scalars_as_mmengine_and_one_read_per_interval(tmp_path):
    from hpm_mm.apis import train
    body = TINY_RUN.format(keep=1, epochs=2) + \
        "default_hooks = dict(logger=dict(interval=3))"
    cfg = tiny_config(tmp_path, body=body, num_images=20)  # 5 iters/epoch
    runs = {}
    for hook in ('RuntimeInfoHook', 'DeferredRuntimeInfoHook'):
        runner = train(
            cfg,
            str(tmp_path / hook),
            quiet=True,
            default_hooks=dict(runtime_info=dict(type=hook)))
        runs[hook] = _history(runner)
    plain, deferred = runs['RuntimeInfoHook'], runs['DeferredRuntimeInfoHook']
    assert set(plain) == set(deferred) and 'train/loss_rec' in plain
    assert 'train/rank_acc' in plain and 'train/alpha' in plain
    for key in plain:
        assert len(plain[key]) == len(deferred[key]) == 10, key
        torch.testing.assert_close(
            torch.tensor(deferred[key], dtype=torch.float64),
            torch.tensor(plain[key], dtype=torch.float64),
            rtol=1e-6,
            atol=1e-7,
            msg=key)


class _Runner:
    """What the hook reads of a runner."""

    def __init__(self, iters_per_epoch):
        from mmengine.logging import MessageHub
        self.message_hub = MessageHub.get_instance('deferred_hook_test')
        self.train_dataloader = list(range(iters_per_epoch))
        self.iter = 0
        self.hooks = []


def test_reads_back_at_the_interval_and_the_epoch_end():
    hook = DeferredRuntimeInfoHook(interval=4)
    runner = _Runner(iters_per_epoch=6)
    hook._every = 4
    reads = []
    for i in range(6):
        runner.iter = i
        out = dict(loss=torch.tensor(float(i)), n=torch.tensor(i), alpha=0.5)
        with HostSyncCounter() as syncs:
            hook.after_train_iter(runner, i, outputs=out)
        reads.append(syncs.count)
        hist = runner.message_hub.log_scalars.get('train/loss')
        seen = len(hist.data[0]) if hist is not None else 0
        assert seen == (4 if 3 <= i < 5 else (6 if i == 5 else 0)), (i, seen)
    assert runner.message_hub.log_scalars['train/n'].data[0].tolist() == \
        [0, 1, 2, 3, 4, 5]
    assert runner.message_hub.log_scalars['train/alpha'].current() == 0.5
    # no value read back one by one (.item()): one list per device at a read
    assert reads == [0] * 6


def test_interval_is_checked():
    with pytest.raises(ValueError, match='positive integer'):
        DeferredRuntimeInfoHook(interval=0)
