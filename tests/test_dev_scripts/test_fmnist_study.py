"""The Fashion-MNIST study driver (.dev_scripts/fmnist_study.py): its
variants are the configs, its runs are scaled by the package's one rule,
and its tables come from the committed jsons alone."""
import importlib.util
import json
import math
import os
import os.path as osp
import sys
import time

import pytest
from conftest import REPO
from mmengine.config import Config


def study():
    spec = importlib.util.spec_from_file_location(
        'fmnist_study', osp.join(REPO, '.dev_scripts', 'fmnist_study.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_are_configs_that_differ_in_their_knobs():
    s = study()
    hpm = Config.fromfile(osp.join(REPO, s.VARIANTS['hpm'][0]))
    for name, (path, _) in s.VARIANTS.items():
        cfg = Config.fromfile(osp.join(REPO, path))
        assert cfg.train_dataloader.dataset.indices == 10000, name
        if name == 'mae':
            assert cfg.model.type == 'MAE'
            continue
        gen = cfg.model.mask_generator
        assert cfg.model.backbone == hpm.model.backbone, name
        assert (gen.alpha_0, gen.alpha_T) == dict(
            hpm=(0., .5), random=(0., 0.), **{'all-hard': (1., 1.)})[name]


def test_a_run_is_its_variant_scaled_to_its_length(tmp_path, monkeypatch):
    """pretrain() writes the variant's config with the run's length, seed and
    the scaled recipe, and trains it through tools/train.py in fp32."""
    s = study()
    calls = []
    monkeypatch.setattr(
        s, 'sh', lambda cmd, log, check=None: calls.append(cmd))
    monkeypatch.setattr(s, 'final_checkpoint', lambda work, epochs: None
                        if not calls else 'x.pth')
    path, sha, commands, _, steps = s.pretrain('hpm', 3, 30, 60000,
                                               str(tmp_path / 'run'),
                                               str(tmp_path / 'log'))
    cfg = Config.fromfile(path)
    assert steps == 30 * math.ceil(60000 / 256)
    assert cfg.train_cfg.max_epochs == 30 and cfg.randomness.seed == 3
    assert cfg.train_dataloader.dataset.indices is None  # all 60k
    assert cfg.param_scheduler[1]['end'] == 30
    assert cfg.model.teacher.momentum_epochs == 30
    assert cfg.model.teacher.momentum == pytest.approx(
        1 / (0.025 * steps), rel=1e-3)
    assert not any(h['type'] == 'KNNEvalHook' for h in cfg.custom_hooks)
    # fp32 on every machine: no --amp (the precision rule would pick bf16
    # on a CPU with native bf16)
    assert calls and calls[0][1] == 'tools/train.py' and \
        '--amp' not in calls[0]
    assert len(sha) == 64 and commands[0].startswith('tools/train.py')


def test_a_resumed_run_counts_the_training_of_its_earlier_attempts(
        tmp_path, monkeypatch):
    """train_seconds of a run resumed after a crash: the first attempt's
    time up to the checkpoint it resumes from (its lost tail and the pause
    not counted) plus the second attempt's whole time."""
    s = study()
    work = tmp_path / 'run'
    clock = [1000.]
    monkeypatch.setattr(s.time, 'time', lambda: clock[0])

    def checkpoint(epoch, at):
        path = work / f'epoch_{epoch}.pth'
        path.write_text('')
        os.utime(path, (at, at))
        (work / 'last_checkpoint').write_text(str(path))

    def crash_after_epoch_2(cmd, log, check=None):
        assert '--resume' not in cmd
        checkpoint(1, 1100.)
        checkpoint(2, 1200.)
        clock[0] = 1290.  # 90 s of epoch 3 lost, then a pause

    with pytest.raises(SystemExit, match='ended before epoch 3'):
        monkeypatch.setattr(s, 'sh', crash_after_epoch_2)
        s.pretrain('mae', 0, 3, 10000, str(work), str(tmp_path / 'log'))
    clock[0] = 5000.

    def resume_to_the_end(cmd, log, check=None):
        assert '--resume' in cmd
        checkpoint(3, 5150.)
        clock[0] = 5160.

    monkeypatch.setattr(s, 'sh', resume_to_the_end)
    *_, seconds, _ = s.pretrain('mae', 0, 3, 10000, str(work),
                                str(tmp_path / 'log'))
    assert seconds == pytest.approx(200. + 160.)


def record(variant, seed, knn, epochs=30):
    return dict(
        name=f'{variant}_{epochs}e_10k_seed{seed}',
        variant=variant,
        seed=seed,
        epochs=epochs,
        images_per_epoch=10000,
        steps=epochs * 40,
        machine=dict(cpu_class='AVX2'),
        train_seconds=600,
        eval_seconds=60,
        finetune_seconds=0,
        metrics=dict(knn_avg=knn, knn_cls=knn - 1),
        pretrain_end=dict(rank_acc=0.8, spearman=0.5))


def test_report_pairs_seeds_with_t_intervals(tmp_path, monkeypatch):
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path))
    for seed, (mae, hpm, rnd) in enumerate([(80., 81., 80.), (79., 80.5, 80.),
                                            (81., 81., 81.5)]):
        for variant, knn in (('mae', mae), ('hpm', hpm), ('random', rnd)):
            r = record(variant, seed, knn)
            (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))
    (tmp_path / 'scratch_seed0.json').write_text(
        json.dumps(
            dict(
                name='scratch_seed0',
                variant='scratch',
                seed=0,
                metrics=dict(finetune_1pct=60.))))
    runs, scratch = s.load_records()
    text = s.report(runs, scratch)
    # differences +1.0, +1.5, 0.0: mean 0.83, sd 0.76, t(2) = 4.303
    half = 4.303 * 0.7637626 / math.sqrt(3)
    assert f'| hpm - mae | 3 | 0.83 ± {half:.2f} (+1.00, +1.50, +0.00) |' \
        in text
    # hard masks alone: HPM against random + L_pred, seed by seed
    assert '| hpm - random | 3 | 0.33 ± ' in text
    assert '(+1.00, +0.50, -0.50)' in text
    assert 'Paired by seed at 30 epochs' in text
    assert '| mae | 3 | 80.00 ± 2.48 |' in text
    # the rule written before seeds 1 and 2, applied to every contrast
    lo, hi = 2.5 / 3 - half, 2.5 / 3 + half
    assert f'- hpm - mae: 95% interval above 0 on none; below 0 on none; ' \
        f'containing 0 on kNN avg [{lo:+.2f}, {hi:+.2f}], kNN CLS ' in text
    # every row of a table has its header's columns
    for table in text.split('\n\n'):
        rows = [r for r in table.splitlines() if r.startswith('|')]
        assert len({r.count('|') for r in rows}) <= 1, table
    doc = tmp_path / 'README.md'
    doc.write_text('head\n<!-- fmnist_study report: begin -->\nold\n'
                   '<!-- fmnist_study report: end -->\ntail\n')
    s.cmd_report(type('A', (), dict(write=str(doc)))())
    out = doc.read_text()
    assert out.startswith('head\n') and out.endswith('tail\n')
    assert 'old' not in out and '0.83 ±' in out


def test_reading_follows_the_rule_written_before_the_seeds():
    """A protocol is above (below) 0 only where its whole 95% interval is;
    one pair is not read."""
    line = study().reading(
        'hpm - mae', {
            'kNN avg': [1.0, 1.2, 1.1],
            'kNN CLS': [-1.0, -1.1, -0.9],
            'linear avg': [1.0, -1.0, 0.0],
            'fine-tune 1%': [0.5],
        })
    # sd 0.1 each: mean -+ 4.303 * 0.1 / sqrt(3) = mean -+ 0.25
    assert line == ('- hpm - mae: 95% interval above 0 on kNN avg '
                    '[+0.85, +1.35]; below 0 on kNN CLS [-1.25, -0.75]; '
                    'containing 0 on linear avg [-2.48, +2.48].')
    assert study().reading('hpm - mae', {'kNN avg': [0.3]}) is None


def test_scratch_keeps_the_fine_tunes_done_earlier(tmp_path, monkeypatch):
    """A later `scratch --low-label 10` adds to the seed's json: the 1%
    result, its commands and its wall time stay."""
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path / 'results'))
    monkeypatch.setattr(s, 'WORK', str(tmp_path / 'work'))
    clock = iter([0., 300., 1000., 2000.])  # 1%: 300 s, then 10%: 1000 s
    monkeypatch.setattr(s, 'machine', lambda: dict(cpu_class='AVX2'))
    monkeypatch.setattr(
        s, 'time', type('T', (), dict(time=lambda: next(clock), strftime=str)))
    monkeypatch.setattr(
        s, 'low_label', lambda work, ckpt, seed, percents, log:
        ({
            f'finetune_{p}pct': 60. + p
            for p in percents
        }, [f'train {p}' for p in percents]))
    s.cmd_scratch(type('A', (), dict(seed=1, low_label=[1]))())
    s.cmd_scratch(type('A', (), dict(seed=1, low_label=[10]))())
    out = json.load(open(tmp_path / 'results' / 'scratch_seed1.json'))
    assert out['metrics'] == dict(finetune_1pct=61., finetune_10pct=70.)
    assert out['finetune_seconds'] == 1300.
    assert out['commands'] == [
        'python .dev_scripts/fmnist_study.py scratch --seed 1 --low-label 1',
        'train 1',
        'python .dev_scripts/fmnist_study.py scratch --seed 1 --low-label 10',
        'train 10'
    ]


def test_check_linear_records_the_probe_pipeline(tmp_path, monkeypatch):
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path))
    monkeypatch.setattr(s, 'final_checkpoint', lambda work, epochs: 'x.pth')
    monkeypatch.setattr(
        s, 'classify', lambda config, work, ckpt, seed, options, epochs, log:
        (85., ['train', 'test']))
    r = record('hpm', 0, 84., epochs=100)
    r['metrics'].update(linear_avg=85.2, linear_avg_ln=85.1)
    result = tmp_path / f"{r['name']}.json"
    result.write_text(json.dumps(r))
    s.cmd_check_linear(
        type('A', (), dict(result=str(result), features=['avg']))())
    out = json.load(open(tmp_path / f"linear_check_{r['name']}.json"))
    assert out['probes']['avg'] == dict(
        config_driven=85.,
        cached=85.2,
        cached_ln=85.1,
        train_pipeline=['PackInputs'])


# what a finished run holds beside record()'s kNN
DONE = dict(
    linear_avg=86., linear_cls=85., finetune_1pct=82., finetune_10pct=86.)


def test_status_lists_what_remains_in_order(tmp_path, monkeypatch, capsys):
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path))
    done = record('mae', 0, 84., epochs=100)
    done['metrics'].update(DONE)
    half = record('hpm', 0, 84., epochs=100)  # its fine-tunes did not finish
    for r in (done, half):
        (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))
    (tmp_path / 'scratch_seed0.json').write_text(
        json.dumps(dict(metrics=dict(finetune_1pct=64.))))
    rows = {name: (cmd, missing) for name, cmd, missing, *_ in s.plan()}
    assert len(rows) == 3 * 4 + 1
    assert rows['mae_100e_10k_seed0'][1] == []
    assert rows['hpm_100e_10k_seed0'] == (
        'python .dev_scripts/fmnist_study.py run hpm --seed 0 --epochs 100 '
        '--images 10000 --low-label 1 10', ['all'])
    assert rows['scratch_seed0'] == (
        'python .dev_scripts/fmnist_study.py scratch --seed 0 --low-label 10',
        ['finetune_10pct'])
    assert rows['scratch_seed1'][0].endswith('--low-label 1 10')
    s.cmd_status(None)
    out = capsys.readouterr().out
    assert '1 of 13 done' in out
    todo = out.split('remaining, in order:')[1].split()
    # seed 0 first: its HPM run, then seed 0's remaining runs
    assert ' '.join(todo).index('run hpm --seed 0') < ' '.join(todo).index(
        'run mae --seed 1')


def test_next_runs_in_order_what_fits_in_the_time_left(tmp_path, monkeypatch,
                                                       capsys):
    """Each remaining run is estimated by its variant's committed wall time
    (+15%); one that does not fit is passed over for a later, shorter one,
    and the clock decides when to stop."""
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path))
    metrics = dict(knn_avg=84., knn_cls=83., **DONE)

    def finished(variant, seed, minutes):
        if variant == 'scratch':
            r = dict(
                name=f'scratch_seed{seed}',
                variant='scratch',
                seed=seed,
                metrics=metrics,
                finetune_seconds=minutes * 60)
        else:
            r = record(variant, seed, 84., epochs=100)
            r.update(
                metrics=metrics,
                train_seconds=minutes * 60 - 120,
                finetune_seconds=60)  # + eval_seconds 60
        (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))

    finished('mae', 0, 60)
    finished('hpm', 0, 120)
    finished('scratch', 0, 25)
    assert s.estimate('mae_100e_10k_seed1') == 3600
    assert s.estimate('random_100e_10k_seed0') == 7200  # not run: longest
    assert s.estimate('scratch_seed1') == 1500
    clock, calls = [0.], []

    def call(argv, cwd):
        variant = argv[2] if argv[2] == 'scratch' else argv[3]
        seed = int(argv[argv.index('--seed') + 1])
        minutes = dict(mae=60, scratch=25)[variant]
        clock[0] += minutes * 60
        finished(variant, seed, minutes)
        calls.append(' '.join(argv[1:]))
        return 0

    monkeypatch.setattr(s.subprocess, 'call', call)
    monkeypatch.setattr(
        s, 'time',
        type('T', (), dict(time=lambda: clock[0], strftime=lambda f: '')))
    s.cmd_next(type('A', (), dict(minutes=100))())
    # random seed 0 (~138 min) does not fit in 100; MAE seed 1 (~69) does
    # (given the 100 minutes left for its pace guard), then scratch seed 1
    # (~29) in the 40 left; then nothing fits in 15
    assert calls == [
        '.dev_scripts/fmnist_study.py run mae --seed 1 --epochs 100 '
        '--images 10000 --low-label 1 10 --minutes 100.0',
        '.dev_scripts/fmnist_study.py scratch --seed 1 --low-label 1 10'
    ]
    assert 'nothing left fits in 15 min; next: random_100e_10k_seed0' in \
        capsys.readouterr().out


def test_next_passes_over_a_run_its_pace_guard_stopped(tmp_path, monkeypatch,
                                                       capsys):
    """A run that exits TOO_SLOW is not tried again in that session; the
    study goes on with what else fits and names it at the end."""
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path))
    r = record('mae', 0, 84., epochs=100)
    r['metrics'].update(DONE)
    (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))
    calls = []

    def call(argv, cwd):
        seed = argv[argv.index('--seed') + 1]
        calls.append(f'{argv[3]} {seed}')
        if argv[2] == 'run':
            assert argv[-2] == '--minutes'
            return s.TOO_SLOW
        (tmp_path / f'scratch_seed{seed}.json').write_text(
            json.dumps(dict(variant='scratch', seed=int(seed), metrics=DONE)))
        return 0

    monkeypatch.setattr(s.subprocess, 'call', call)
    s.cmd_next(type('A', (), dict(minutes=1000))())
    assert calls == [
        'hpm 0', 'random 0', '--seed 0', 'mae 1', 'hpm 1', 'random 1',
        '--seed 1', 'mae 2', 'hpm 2', 'random 2', '--seed 2', 'all-hard 0'
    ]
    assert ('next: hpm_100e_10k_seed0 (~13 min, too slow on this machine)'
            in capsys.readouterr().out)


def test_pace_guard_projects_the_run_from_its_checkpoints(
        tmp_path, monkeypatch):
    """The pace is measured between this attempt's checkpoint file times;
    evaluation + fine-tunes are the reference run's, scaled by the paces'
    ratio; the guard speaks only when the projection passes the deadline."""
    s = study()
    monkeypatch.setattr(s, 'RESULTS', str(tmp_path / 'results'))
    (tmp_path / 'results').mkdir()
    ref = record('random', 0, 85., epochs=100)
    ref.update(train_seconds=5000, eval_seconds=200, finetune_seconds=1800)
    (tmp_path / 'results' / 'random_100e_10k_seed0.json').write_text(
        json.dumps(ref))
    work = tmp_path / 'run'
    work.mkdir()
    clock = [1000.]
    monkeypatch.setattr(s.time, 'time', lambda: clock[0])

    def checkpoint(epoch, when):
        path = work / f'epoch_{epoch}.pth'
        path.write_bytes(b'')
        os.utime(path, (when, when))
        (work / 'last_checkpoint').write_text(str(path))

    checkpoint(4, 900.)  # an earlier attempt: the pace starts after it
    # 100 s per epoch: twice the reference's 50 -> evaluation + fine-tunes
    # 2 x 2000 s; from epoch 7: 93 epochs of training, 9300 + 4000 s
    check = s.pace_guard(
        'random_100e_10k_seed2', str(work), 100, until=1300. + 13300 + 60)
    assert check() is None
    checkpoint(5, 1100.)
    assert check() is None  # one checkpoint: no pace yet
    checkpoint(6, 1200.)
    assert check() is None  # one epoch of pace
    checkpoint(7, 1300.)
    clock[0] = 1300.
    assert check() is None  # 13300 s needed, 13360 left
    clock[0] = 1400.
    message = check()
    assert message.startswith('random_100e_10k_seed2 cannot finish in time')
    for part in ('100 s per epoch (epochs 6-7)', 'needs 222 more min',
                 'training 155 min', 'fine-tunes 67 min',
                 'random_100e_10k_seed0', '(2.00x)', '221 are left',
                 'Stopped after epoch 7', 'Fix: '):
        assert part in message, part
    # a variant not run yet: the reference is another variant's, whose pace
    # does not measure this machine; its evaluation + fine-tunes as they were
    other = s.pace_guard('all-hard_100e_10k_seed0', str(work), 100, until=0.)
    for epoch in (8, 9):
        checkpoint(epoch, 1300. + 100 * (epoch - 7))
        assert other() is None
    checkpoint(10, 1600.)
    assert 'fine-tunes 33 min: random_100e_10k_seed0\'s as they were' in \
        other()


def test_a_run_its_guard_stops_exits_3_and_leaves_nothing_to_resume(
        tmp_path, monkeypatch, capsys):
    """sh() stops the command when its check speaks; run --minutes then
    removes the work dir (no later session resumes a part-trained run)."""
    s = study()
    monkeypatch.setattr(s, 'POLL_SECONDS', 0.05)
    log = tmp_path / 'log'
    start = time.time()
    with pytest.raises(s.TooSlow, match='too slow'):
        s.sh([sys.executable, '-c', 'import time; time.sleep(60)'],
             str(log),
             check=lambda: 'too slow')
    assert time.time() - start < 30
    monkeypatch.setattr(s, 'WORK', str(tmp_path / 'work'))
    seen = {}

    def pretrain(*args):
        seen['check'] = args[-1]
        raise s.TooSlow('mae_100e_10k_seed1 cannot finish in time')

    monkeypatch.setattr(s, 'pretrain', pretrain)
    with pytest.raises(SystemExit) as exit_:
        s.main([
            'run', 'mae', '--seed', '1', '--epochs', '100', '--minutes', '60'
        ])
    assert exit_.value.code == s.TOO_SLOW and callable(seen['check'])
    assert not (tmp_path / 'work' / 'mae_100e_10k_seed1').exists()
    assert 'cannot finish in time' in capsys.readouterr().err
