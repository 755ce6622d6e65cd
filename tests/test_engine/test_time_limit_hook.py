"""TimeLimitHook: a run out of time stops after a checkpointed epoch, never
between checkpoints (the study's end-to-end case:
tests/test_dev_scripts/test_fmnist_study.py)."""
import logging
from types import SimpleNamespace

import pytest
from mmengine.hooks import CheckpointHook

from hpm_mm.engine.hooks import TimeLimitHook
from hpm_mm.engine.hooks import time_limit_hook as T


def _runner(interval, max_epochs=10):
    return SimpleNamespace(
        hooks=[CheckpointHook(interval=interval)],
        epoch=0,
        max_epochs=max_epochs,
        train_loop=SimpleNamespace(stop_training=False),
        logger=logging.getLogger('time_limit_test'),
        work_dir='w')


def test_stops_at_the_last_checkpointed_epoch_that_fits(monkeypatch):
    clock = [0.]
    monkeypatch.setattr(T.time, 'time', lambda: clock[0])
    hook, runner = TimeLimitHook(minutes=5), _runner(interval=2)
    hook.before_train(runner)  # deadline at 300 s
    stops = []
    for epoch in range(10):
        clock[0] += 60  # 60 s per epoch
        runner.epoch = epoch
        hook.after_train_epoch(runner)
        if runner.train_loop.stop_training:
            stops.append(epoch + 1)
            break
    # after epoch 4 (240 s) the next two epochs (120 s) end past 300 s;
    # epoch 3 has no checkpoint, so the hook never stops there
    assert stops == [4] and hook.stopped_at == 4


def test_never_stops_without_a_by_epoch_checkpoint_or_in_time(monkeypatch):
    clock = [0.]
    monkeypatch.setattr(T.time, 'time', lambda: clock[0])
    for interval, minutes in ((-1, 1), (1, 1000)):
        hook, runner = TimeLimitHook(minutes=minutes), _runner(interval)
        hook.before_train(runner)
        for epoch in range(10):
            clock[0] += 60
            runner.epoch = epoch
            hook.after_train_epoch(runner)
        assert not runner.train_loop.stop_training


def test_bad_allowance_is_one_line():
    for kwargs in ({}, dict(minutes='5'), dict(minutes=0)):
        with pytest.raises(ValueError, match='TimeLimitHook'):
            TimeLimitHook(**kwargs)
