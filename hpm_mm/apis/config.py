"""The command line's config options and a run's config as every tool
makes it (the config room itself: :mod:`hpm_mm.engine.config_check`)."""
import copy
import os
import os.path as osp
import re
from typing import Optional

from mmengine.config import Config, DictAction

from hpm_mm.engine.config_check import load_config
from hpm_mm.errors import HPMError


class CfgOptionsAction(DictAction):
    """mmengine's :class:`DictAction`, refusing an option that is not
    ``key=value`` with one line (mmengine raised a bare unpacking error)."""

    def __call__(self, parser, namespace, values, option_string=None):
        options = copy.copy(getattr(namespace, self.dest, None) or {})
        for kv in values:  # a plain value keeps its spaces (a path)
            key, eq, val = kv.partition('=')
            key = key.strip()  # 'key =value' means key=value
            if not eq or not re.fullmatch(r'[\w.]+', key):
                parser.error(f'{option_string} {kv!r}: expected key=value. '
                             'Fix: e.g. train_cfg.max_epochs=20')
            if re.search(r'(^|[=\[(,\s])dict\(', val):
                # mmengine's parser recurses without end on dict(...)
                parser.error(f'{option_string} {kv!r}: values cannot be '
                             'dict(...) here. Fix: set the keys one by one '
                             '(a.b=1 a.c=2).')
            # a list or tuple: [a,b], (a,b), a,b; else the value as written
            # (a path with parentheses or spaces keeps them)
            options[key] = self._parse_iterable(val) if re.match(
                r'\s*[\[(]', val) or ',' in val else \
                self._parse_int_float_bool(val.strip('\'"'))
        setattr(namespace, self.dest, options)


#: the values of ``--launcher`` (mmengine's)
LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def parse_launched(parser, argv=None):
    """``parser``'s arguments with the options of a command that a launcher
    starts (tools/train.py, tools/test.py): ``--cfg-options``,
    ``--launcher`` and torch.distributed.launch's ``--local-rank``, which
    becomes ``LOCAL_RANK`` unless the launcher set it."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override settings of the config, key=value (xxx=[a,b] lists)')
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def run_config(config, work_dir: Optional[str], launcher: str, *options:
               Optional[dict]) -> Config:
    """A run's config as every tool makes it: :func:`load_config` of
    ``config`` (a file or a loaded config) with each of ``options`` merged
    (the image spec applied after them), the launcher, and the work dir
    (given, the config's, else ``work_dirs/<config name>``)."""
    if launcher not in LAUNCHERS:
        raise HPMError(f'launcher={launcher!r}: give one of '
                       f'{", ".join(LAUNCHERS)}.')
    cfg = load_config(config, *options)
    if launcher == 'pytorch' and not all(
            k in os.environ for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR')):
        raise HPMError("--launcher pytorch needs torchrun's environment "
                       '(RANK). Fix: bash tools/dist_train.sh CONFIG GPUS.')
    cfg.launcher = launcher
    if work_dir is not None:
        if osp.exists(work_dir) and not osp.isdir(work_dir):
            raise HPMError(f'--work-dir {work_dir} is a file, not a folder. '
                           'Fix: give a folder (it is made if missing).')
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        name = osp.basename(cfg.filename or 'config')
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(name)[0])
    return cfg
