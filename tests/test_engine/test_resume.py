"""The resume room (hpm_mm/engine/resume.py): which checkpoint a training
run continues and whether it is this run's, tried through hpm_mm.apis.train
on tiny runs (1-block 16-d ViT, 8 generated images, 2 steps an epoch)."""
import os.path as osp
import re
import shlex
import shutil

import pytest
import torch
from helpers import FMNIST_CFG, TINY_RUN, tiny_config, tool_main, train

from hpm_mm.errors import HPMError


def _config(tmp_path, body: str = '') -> str:
    return tiny_config(
        tmp_path,
        FMNIST_CFG,
        TINY_RUN.format(keep=3, epochs=3) + body,
        num_images=8)


def _weights(ckpt_path, out) -> str:
    """The weights of ``ckpt_path`` as official2hpm.py writes an import:
    ``state_dict`` and ``meta`` (cfg, imported), no training state."""
    ckpt = torch.load(ckpt_path, map_location='cpu')
    torch.save(
        dict(
            state_dict=ckpt['state_dict'],
            meta=dict(cfg=ckpt['meta']['cfg'], imported=dict(source='mae'))),
        out)
    return str(out)


def _files(work) -> list:
    """``work``'s files and times, its lock (rewritten by every start) left
    out."""
    return sorted((str(p), p.stat().st_mtime_ns) for p in work.rglob('*')
                  if p.name != '.run.lock')


def _stopped_after(work, epoch: int) -> None:
    """``work`` as a stop during epoch ``epoch + 1`` leaves it."""
    for path in work.glob('epoch_*.pth'):
        if int(path.stem.split('_')[1]) > epoch:
            path.unlink()
    (work / 'last_checkpoint').write_text(str(work / f'epoch_{epoch}.pth'))


def test_load_from_beside_resume_continues_only_the_run_it_started(tmp_path):
    """``resume = True`` beside ``load_from=<weights>`` (an imported config's
    default): a new work dir starts from the weights and the same command
    after a stop continues that run; a work dir holding another run's
    checkpoints (one from scratch, one from other weights) is refused in one
    line and left as it was (it resumed that run and dropped the weights,
    saying only 'resume: from ...')."""
    cfg = _config(tmp_path, 'resume = True')
    src = tmp_path / 'src'
    train(cfg, src, cfg_options={'train_cfg.max_epochs': 1})
    weights = _weights(src / 'epoch_1.pth', tmp_path / 'imported.pth')
    mine = tmp_path / 'mine'
    out = train(cfg, mine, load_from=weights)
    assert 'weights without training state; the run starts from them' in out
    _stopped_after(mine, 2)
    out = train(cfg, mine, load_from=weights)  # the same command again
    assert f'resume: from {mine}/epoch_2.pth' in out
    assert 'resumed epoch: 2, iter: 4' in out
    inside = tmp_path / 'inside'  # the weights in the work dir itself
    inside.mkdir()
    shutil.copy(weights, inside / 'hpm.pth')
    train(cfg, inside, load_from=str(inside / 'hpm.pth'))
    _stopped_after(inside, 2)
    out = train(cfg, inside, load_from=str(inside / 'hpm.pth'))
    assert 'resumed epoch: 2, iter: 4' in out
    other = tmp_path / 'other'
    train(cfg, other)  # from scratch
    _stopped_after(other, 2)
    again = str(tmp_path / 'imported_2.pth')
    shutil.copy(weights, again)
    for work, source in ((other, weights), (mine, again)):
        before = _files(work)
        with pytest.raises(HPMError) as e:
            train(cfg, work, load_from=source)
        line = str(e.value)
        assert '\n' not in line and f'none begun from {source}' in line
        assert str(work) in line and 'epoch_2.pth' in line, line
        assert _files(work) == before


def test_a_checkpoint_from_elsewhere_resumed_never_mixes_runs(tmp_path):
    """Another run's checkpoint resumed into a work dir (``--resume PATH``,
    or ``load_from`` beside ``resume = True``): refused where the work dir
    holds another run's checkpoints (it wrote its epochs over them); the same
    command after a stop continues the newest checkpoint of the run begun
    from it (``resume = True`` took the file again and redid the epochs)."""
    cfg = _config(tmp_path, 'resume = True')
    src, work, mine = tmp_path / 'src', tmp_path / 'work', tmp_path / 'mine'
    train(cfg, src, cfg_options={'randomness.seed': 1})
    train(cfg, work)
    _stopped_after(work, 1)
    first = str(src / 'epoch_1.pth')
    before = _files(work)
    for kwargs in (dict(resume=first), dict(load_from=first)):
        with pytest.raises(HPMError) as e:
            train(cfg, work, **kwargs)
        line = str(e.value)
        assert '\n' not in line and f'none begun from {first}' in line
        assert _files(work) == before
    out = train(cfg, mine, load_from=first)
    assert 'resumed epoch: 1, iter: 2' in out
    _stopped_after(mine, 2)
    out = train(cfg, mine, load_from=first)  # the same command again
    assert 'resumed epoch: 2, iter: 4' in out
    out = train(cfg, mine, resume=first)  # asked for: that file
    assert 'resumed epoch: 1, iter: 2' in out


def test_resume_never_chooses_between_runs_by_date(tmp_path):
    """Neither ``last_checkpoint`` nor ``run_id`` in the work dir, another
    run's newer checkpoint dropped in: ``--resume`` is refused in one line
    naming both runs' files and the fix (it continued the other run's);
    the pointer put back (edited), this run's checkpoint is resumed."""
    cfg = _config(tmp_path)
    other, work = tmp_path / 'other', tmp_path / 'work'
    train(cfg, other, cfg_options={'randomness.seed': 1})
    train(cfg, work)
    _stopped_after(work, 2)
    for name in ('last_checkpoint', 'run_id'):
        (work / name).unlink()
    shutil.copy(other / 'epoch_3.pth', work / 'epoch_3.pth')
    with pytest.raises(HPMError) as e:
        train(cfg, work, resume=True)
    line = str(e.value)
    assert '\n' not in line and 'runs disagree' in line, line
    assert 'epoch_3.pth' in line and 'epoch_2.pth' in line, line
    assert '--resume PATH' in line, line
    (work / 'last_checkpoint').write_text(str(work / 'epoch_2.pth'))
    out = train(cfg, work, resume=True)
    assert f'resume: skipped {work}/epoch_3.pth: newer than' in out
    assert 'resumed epoch: 2, iter: 4' in out


def test_resume_of_weights_without_training_state_is_one_line(tmp_path):
    """``--resume`` of an imported checkpoint (weights and meta, no epoch,
    optimizer or message hub): one line naming the file and load_from
    (``KeyError: 'epoch'`` before), before the work dir is written."""
    cfg = _config(tmp_path)
    src = tmp_path / 'src'
    train(cfg, src, cfg_options={'train_cfg.max_epochs': 1})
    weights = _weights(src / 'epoch_1.pth', tmp_path / 'imported.pth')
    with pytest.raises(HPMError) as e:
        train(cfg, tmp_path / 'work', resume=weights)
    line = str(e.value)
    assert '\n' not in line and 'no training state' in line, line
    assert f'load_from={weights}' in line, line
    assert not (tmp_path / 'work').exists() or \
        not list((tmp_path / 'work').glob('*.pth'))


def test_a_branch_keeps_its_line_through_later_resumes(tmp_path):
    """A copied work dir resumed continues as a branch (its run id file:
    ``PARENT STEP``); resumed again it keeps that line (it was rewritten
    without it), and its start (the parent's checkpoint in the copy) is
    still its own: with its later checkpoints cut short it resumes from
    there, as the branch, not as the parent run."""
    cfg = _config(tmp_path)
    work, copy = tmp_path / 'work', tmp_path / 'copy'
    train(cfg, work, cfg_options={'train_cfg.max_epochs': 1})
    shutil.copytree(work, copy)

    def longer(epochs):
        return {'train_cfg.max_epochs': epochs, 'resume_changed_run': True}

    out = train(cfg, copy, resume=True, cfg_options=longer(2))
    assert f'resume: {copy} is a copy of {work}' in out
    ids = (copy / 'run_id').read_text().splitlines()
    parent = (work / 'run_id').read_text().split()[0]
    assert ids[2] == f'{parent} 1' and ids[0] != parent
    out = train(cfg, copy, resume=True, cfg_options=longer(3))
    assert f'resume: from {copy}/epoch_2.pth' in out
    assert (copy / 'run_id').read_text().splitlines() == ids
    for name in ('epoch_2.pth', 'epoch_3.pth'):  # cut short
        data = (copy / name).read_bytes()
        (copy / name).write_bytes(data[:len(data) // 3])
    out = train(cfg, copy, resume=True, cfg_options=longer(3))
    assert f'resume: from {copy}/epoch_1.pth' in out, out[-2000:]
    assert (copy / 'run_id').read_text().splitlines() == ids
    end = torch.load(copy / 'epoch_3.pth')['meta']['hpm_run']
    assert end['run_id'] == ids[0]
    deeper = tmp_path / 'deeper'  # a copy of the branch: a branch of it
    shutil.copytree(copy, deeper)
    (deeper / 'epoch_3.pth').unlink()
    out = train(cfg, deeper, resume=True, cfg_options=longer(3))
    assert f'resume: from {deeper}/epoch_2.pth' in out
    line = (deeper / 'run_id').read_text().splitlines()[2].split()
    assert line == [parent, '1', ids[0], '2'], line


def test_a_bare_resume_keeps_the_configs_load_from(tmp_path):
    """An imported checkpoint's config (``load_from=<weights>``) with a bare
    ``--resume`` in a new work dir starts from the weights (the flag dropped
    ``load_from``: it trained from scratch, saying only 'no checkpoint
    yet'); in a work dir holding another run the refusal's fix, followed
    as printed, continues that run (its fix '--resume' would have come back
    to the same refusal). With that run's checkpoints all cut short, the
    line is ``--resume``'s own (``resume = True`` beside ``load_from`` said
    'none begun from' the weights: untrue)."""
    cfg = _config(tmp_path)
    src, new, other = (tmp_path / n for n in ('src', 'new', 'other'))
    train(cfg, src, cfg_options={'train_cfg.max_epochs': 1})
    weights = _weights(src / 'epoch_1.pth', tmp_path / 'imported.pth')
    imported = tmp_path / 'imported_cfg.py'
    imported.write_text(f'_base_ = [{cfg!r}]\nload_from = {weights!r}\n')

    def tool(work, *args):
        return tool_main('train.py', imported, '--work-dir', work, *args)

    done = tool(new, '--resume', '--cfg-options', 'train_cfg.max_epochs=1')
    assert done.returncode == 0, done.stderr[-2000:]
    run = torch.load(new / 'epoch_1.pth')['meta']['hpm_run']
    assert run['start'] == osp.realpath(weights), run
    data = (new / 'epoch_1.pth').read_bytes()  # its one checkpoint cut
    (new / 'epoch_1.pth').write_bytes(data[:len(data) // 3])
    refused = tool(new, '--resume')
    line = refused.stderr.strip().splitlines()[-1]
    assert 'no complete checkpoint of this run' in line, line
    train(cfg, other)  # from scratch, stopped after its first epoch
    _stopped_after(other, 1)
    refused = tool(other, '--resume')
    line = refused.stderr.strip().splitlines()[-1]  # (its one line)
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert f'none begun from {weights}' in line, line
    fix = re.search(r'Fix: (.*) to continue it', line).group(1)
    done = tool(other, *shlex.split(fix))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (other / 'epoch_3.pth').exists()
    end = torch.load(other / 'epoch_3.pth')['meta']['hpm_run']
    assert end['start'] is None  # the run from scratch, continued


def test_a_resumed_run_holds_its_checkpoints_state(tmp_path):
    """What a resume restores, pinned: the model (teacher included), the
    optimizer's moments and hyper-parameters, the schedulers, the epoch and
    iteration, the non-finite guard's step counts and last step equal the
    checkpoint's."""
    from mmengine.config import Config
    from mmengine.registry import RUNNERS
    cfg = _config(tmp_path, 'model = dict(mask_generator=dict('
                  'alpha_0=0.5, alpha_T=1.0))')  # the teacher from step 1
    work = tmp_path / 'work'
    train(cfg, work)
    _stopped_after(work, 1)
    ckpt = torch.load(work / 'epoch_1.pth')
    config = Config.fromfile(cfg)
    config.work_dir, config.resume = str(work), True
    runner = RUNNERS.build(config)
    runner._train_loop = runner.build_train_loop(runner._train_loop)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    runner.load_or_resume()
    runner.release_work_dir()
    assert (runner.epoch, runner.iter) == (1, 2)
    state = runner.model.state_dict()
    assert state.keys() == ckpt['state_dict'].keys()
    for k, v in ckpt['state_dict'].items():
        assert torch.equal(state[k], v), k
    assert int(state['teacher.steps']) == 2
    opt = runner.optim_wrapper.optimizer.state_dict()
    for i, saved in ckpt['optimizer']['state'].items():
        for key, value in saved.items():
            assert torch.equal(opt['state'][i][key], value), key
    assert [{
        k: v
        for k, v in g.items() if k != 'params'
    } for g in opt['param_groups']] == [{
        k: v
        for k, v in g.items() if k != 'params'
    } for g in ckpt['optimizer']['param_groups']]
    assert [s.state_dict()
            for s in runner.param_schedulers] == ckpt['param_schedulers']
    base = ckpt['optimizer']['base_param_settings']  # (mmengine's base_lr)
    assert base['lr'] == runner.optim_wrapper.base_param_settings['lr']
    guard, run = runner.optim_wrapper, ckpt['meta']['hpm_run']
    assert [guard.skipped_steps, guard.applied_steps] == run['steps'] == [0, 2]
    assert guard.last_applied == run['last_applied'] == 1.0
