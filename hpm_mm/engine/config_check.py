"""The config room: a run's config loaded (a file or a loaded Config) and
changed with one clear line for what cannot work: a syntax error, a
missing package or ``_base_``, an option or a file's variable nothing
reads, a key that what receives its dict does not take. Every tool,
``hpm_mm.apis`` and the runner (``RUNNERS.build`` users too) read a config
through :func:`load_config`, once: the runner takes a config it made as
it is (:func:`is_loaded`)."""
import ast
import copy
import difflib
import functools
import importlib
import inspect
import os
import os.path as osp
import re
import textwrap
from contextlib import suppress
from typing import Any, Optional, Union

import torch
from mmengine.config import Config
from mmengine.runner import FlexibleRunner, Runner

from hpm_mm.errors import HPMError, all_registries, did_you_mean, no_such_key

_MISSING = object()
_KINDS = {bool: 'True or False', int: 'a whole number', float: 'a number'}
#: the mark of a config :func:`load_config` made (kept by its copies)
_LOADED = '_hpm_loaded'


def _step(node: Any, part: str) -> Any:
    """One level down a config: a list's element by index, a dict's
    value by key; ``_MISSING`` where there is none."""
    if isinstance(node, (list, tuple)) and part.isdigit() and \
            int(part) < len(node):
        return node[int(part)]
    return node[part] if isinstance(node, dict) and part in node else _MISSING


def _misfit(old: Any, new: Any, default: bool = False) -> Optional[str]:
    """What ``new`` must be to stand where the config has ``old`` (a bool:
    a bool, an int: an int, a float: a number), or where a constructor's
    ``default`` is ``old`` (an int: a number too, a tuple: as many values);
    None where it fits."""
    if new is None:
        return None
    if default and isinstance(old, tuple):
        fits = isinstance(new, (list, tuple)) and len(new) == len(old)
        return None if fits else f'{len(old)} values'
    kind = float if default and type(old) is int else type(old)
    return None if kind not in _KINDS or isinstance(
        new, (int, float) if kind is float else kind) and (kind is bool) == (
            type(new) is bool) else _KINDS[kind]


#: top-level keys a run reads besides the arguments of mmengine's runners:
#: the config system's, mmengine's runner's own ``cfg.get``s, hpm_mm's
CONFIG_KEYS = frozenset({
    '_base_', 'custom_imports', 'runner_type', 'model_wrapper_cfg',
    'activation_checkpointing', 'efficient_conv_bn_eval',
    'find_unused_parameters', 'sync_bn', 'precision', 'image', 'console',
    'resume_changed_run'
})


def run_keys() -> frozenset:
    """The top-level keys a run reads: the arguments of mmengine's runners,
    :data:`CONFIG_KEYS`, and the ``config_keys`` a registered component
    declares (a plugin's hook that reads ``runner.cfg.my_key`` says
    ``config_keys = ('my_key', )``), read when asked, so a plugin's
    ``custom_imports`` count."""
    keys = set(CONFIG_KEYS)
    for runner in (Runner, FlexibleRunner):
        keys |= set(inspect.signature(runner.__init__).parameters) - {'self'}
    for registry in all_registries():
        for cls in registry.module_dict.values():
            keys |= set(getattr(cls, 'config_keys', ()))
    return frozenset(keys)


def _leaves(cfg: dict) -> dict:
    """``key -> dotted path`` of every nested dict key of a config (its
    shallowest path, as :func:`_dicts` names it), top level left out."""
    out = {}
    for path, node in _dicts(cfg):
        for key in (k for k in node if isinstance(k, str)):
            where = f'{path}.{key}'
            if where.count('.') < out.get(key, where + '.').count('.'):
                out[key] = where
    return out


def unread_key(cfg: dict,
               top: str,
               keys: frozenset,
               rest: str = '',
               cutoff: float = 0.8) -> Optional[str]:
    """Why the top-level ``top`` of ``cfg``, which nothing reads, is a
    mistake, or None: it names a key of a sub-config (``seed`` is read as
    ``randomness.seed``), or is close to a key the run reads."""
    leaves = _leaves(cfg)
    if top in leaves:
        return (f'the run reads {top!r} only as {leaves[top]}, not at the '
                f'top level. Fix: {leaves[top]}=...')
    near = functools.partial(
        difflib.get_close_matches, top, n=1, cutoff=cutoff)
    close = [c + rest for c in near(sorted(keys))] or \
        [leaves[c] for c in near(sorted(leaves))]
    return f'nothing reads {top!r}. Fix: did you mean {close[0]}?' \
        if close else None


def _by_type(cfg: dict, key: str) -> str:
    """``key`` with each list element named by its ``type`` replaced by its
    index: ``custom_hooks.KNNEvalHook.ks`` -> ``custom_hooks.1.ks``, so
    that an option still means the same hook when the list changes."""
    node, parts = cfg, key.split('.')
    for i, part in enumerate(parts):
        if isinstance(node, (list, tuple)) and not part.isdigit():
            hits = [
                j for j, item in enumerate(node)
                if isinstance(item, dict) and item.get('type') == part
            ]
            if len(hits) != 1:
                raise HPMError(f'--cfg-options {key}: {len(hits) or "no"} '
                               f'element(s) of type {part!r}. Fix: its index, '
                               f'{".".join(parts[:i])}.N.')
            parts[i] = part = str(hits[0])
        node = _step(node, part)
    return '.'.join(parts)


def merge_cfg_options(cfg: Config, options: dict) -> Config:
    """``cfg.merge_from_dict(options)``, refusing in one line a key nothing
    reads (a config-file variable such as ``max_epochs``, a typo such as
    ``trian_cfg``) or a value whose type does not fit the config's
    (``max_epochs=abc``, ``lr=fast``). A list element may be named by its
    ``type`` instead of its index (``custom_hooks.KNNEvalHook.ks=[10]``)."""
    current = cfg.to_dict()
    options = {_by_type(current, k): v for k, v in options.items()}
    keys = run_keys()
    for key, value in options.items():
        top = key.split('.')[0]
        if top not in keys:
            why = unread_key(current, top, keys, key[len(top):]) or (
                f"nothing reads {top!r}. Fix: a key the run reads, or "
                "config_keys = (...) on a plugin's class")
            raise HPMError(f'--cfg-options {key}=...: {why}')
        parts = key.split('.')
        for i in range(1, len(parts)):
            node = functools.reduce(_step, parts[:i], current)
            if isinstance(node, (list, tuple)) and parts[i].isdigit() and \
                    int(parts[i]) >= len(node):
                raise HPMError(f'--cfg-options {key}: beyond its list of '
                               f'{len(node)}. Fix: an index < {len(node)}.')
        old = functools.reduce(_step, parts, current)
        if _misfit(old, value):
            raise HPMError(f'--cfg-options {key}={value!r}: expected '
                           f'{_misfit(old, value)} (the config has {old!r}).')
    cfg.merge_from_dict(options)
    return cfg


def _bases(path: str) -> list:
    """``(name, path)`` of each file the config file ``path``'s ``_base_``
    names, as mmengine resolves it (relative ones from its folder, ``pkg::``
    ones in that package), missing ones too."""
    out = []
    for name in Config._get_base_files(path):
        try:
            out.append(
                (name, osp.normpath(Config._get_cfg_path(name, path)[0])))
        except Exception:  # a package's file that is not there
            out.append((name, name))
    return out


#: the files mmengine reads as configs
CONFIG_FILES = ('.py', '.yml', '.yaml', '.json')


def _config_files(path: str, seen: Optional[set] = None):
    """``path`` and the files it inherits, each once, in mmengine's order;
    a file's bases read only once the caller has taken the file (its
    syntax checked)."""
    seen = set() if seen is None else seen
    if osp.isfile(path) and osp.splitext(path)[1] in CONFIG_FILES and \
            osp.realpath(path) not in seen:
        seen.add(osp.realpath(path))
        yield path
        for _, base in _bases(path):
            yield from _config_files(base, seen)


def _near(path: str, naming: str = '') -> str:
    """What is close to the missing file ``path`` in its folder (not the
    file ``naming`` it: a config is no base of itself)."""
    folder, name = osp.dirname(path) or '.', osp.basename(path)
    names = set(os.listdir(folder) if osp.isdir(folder) else
                ()) - {osp.basename(naming)}
    return ' as a file: it is a folder' if osp.isdir(path) else did_you_mean(
        name, names)


def _syntax_error(path: str, error: SyntaxError) -> str:
    """Where a config's syntax error is: the file (``path`` or the
    ``_base_`` it inherits that holds it) and line (mmengine names a
    temporary copy of the file, or none)."""
    for file in _config_files(path):
        try:
            _file_names(file)  # (parses a Python file)
        except SyntaxError as e:
            text = (e.text or '').strip()
            return (f'{file}, line {e.lineno}: {e.msg}' +
                    (f': {text}' if text else '') +
                    (f' (inherited by {path})' if file != path else ''))
    return f'a syntax error in {path} or a file it inherits ({error})'


#: keys a builder takes off a ``type=`` dict before its constructor sees the
#: rest: mmengine's (a hook's priority, a scheduler's
#: convert_to_iter_based, an optimizer wrapper's constructor and
#: paramwise_cfg, a weight init's override and its name), a norm layer's
#: requires_grad (mmcv's and mmpretrain's build_norm_layer)
BUILDER_KEYS = frozenset({
    'type', '_scope_', 'priority', 'convert_to_iter_based', 'constructor',
    'paramwise_cfg', 'override', 'name', 'requires_grad'
})
#: the type mmengine builds a run's dict as where it names none
_DEFAULT_TYPES = dict(
    optim_wrapper='OptimWrapper',
    val_cfg='ValLoop',
    test_cfg='TestLoop',
    log_processor='LogProcessor',
    visualizer='Visualizer')


def _key_uses(obj, name: str) -> tuple:
    """The keys the code of ``obj`` reads from or sets in the dict it calls
    ``name`` (``name.get('k')``, ``.pop``, ``.setdefault``, ``name['k']``,
    ``self.name...`` alike); how many uses of a plain ``name`` those and
    its ``update``s are, and how many pass it on (``__init__(**name)``).
    None without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return None
    keys, uses, passed = {}, 0, 0
    for n in ast.walk(tree):
        call = isinstance(n, ast.Call)
        if call and getattr(n.func, 'attr', 0) == '__init__':
            passed += sum(
                k.arg is None and getattr(k.value, 'id', 0) == name
                for k in n.keywords)
        held, key = (n.func.value, n.args and n.args[0]) if call and getattr(
            n.func, 'attr', 0) in ('get', 'pop', 'setdefault', 'update') \
            else (n.value, n.slice) if isinstance(n, ast.Subscript) else (0, 0)
        if name not in (getattr(held, 'id', 0), getattr(held, 'attr', 0)):
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            keys[key.value] = None
            uses += 1
        elif call and n.func.attr == 'update':
            uses += 1
    return tuple(keys), uses, passed, sum(
        getattr(n, 'id', 0) == name for n in ast.walk(tree))


@functools.lru_cache(maxsize=None)
def _takes(obj) -> Optional[tuple]:
    """The keyword arguments ``obj`` (a function, or a class: its
    constructor) takes; through a ``**kwargs`` that a class's ``__init__``
    passes on to its base's, the base's too, and the keys it reads from it.
    None where any key may be right (another ``**kwargs``, no
    signature)."""
    inits = [
        vars(c)['__init__'] for c in obj.__mro__ if '__init__' in vars(c)
    ] if inspect.isclass(obj) else [obj]
    names = []
    for init in inits:
        if init in (object.__init__, torch.nn.Module.__init__):
            break
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            return None
        names += [
            p.name for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        rest = [p.name for p in params if p.kind == p.VAR_KEYWORD]
        if not rest:
            break
        found = _key_uses(init, rest[0]) if init is not obj else None
        if not found or not found[2] or sum(found[1:3]) != found[3]:
            return None
        names += found[0]
    return tuple(dict.fromkeys(n for n in names if n != 'self'))


@functools.lru_cache(maxsize=None)
def _keys_read(obj, name: str) -> tuple:
    """The keys the code of ``obj`` (a function, or a class and its bases)
    reads from the dict it calls ``name`` (:func:`_key_uses`)."""
    parts = obj.__mro__ if inspect.isclass(obj) else [obj]
    return tuple(
        dict.fromkeys(
            k for part in parts for k in (_key_uses(part, name) or [()])[0]))


def _dicts(node: Any, path: str = ''):
    """``(path, dict)`` for every dict below a config's top, a list's
    element named by its ``type`` where that is unique in the list (as
    ``--cfg-options`` names it: ``custom_hooks.KNNEvalHook``)."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        types = [i.get('type') if isinstance(i, dict) else None for i in node]
        items = [(t if isinstance(t, str) and types.count(t) == 1 else i, v)
                 for i, (t, v) in enumerate(zip(types, node))]
    else:
        return
    for key, value in items:
        where = f'{path}.{key}' if path else str(key)
        if isinstance(value, dict):
            yield where, value
        yield from _dicts(value, where)


def _receiver(path: str, node: dict, cfg: dict, registered,
              parents: dict) -> Optional[tuple]:
    """``(name, keys it takes, the classes)`` of what takes the config's
    dict at ``path``: the code of mmengine's runner that reads it by key,
    else its ``type`` (a registered name, mmengine's default where it names
    none; the arch_zoo keys of an ``arch`` dict's backbone); None where that
    is unknown or may take any key. ``parents``: the dicts by path."""
    from mmengine.dist import utils
    from mmengine.utils.dl_utils import set_multi_processing
    from mmpretrain.models import BaseSelfSupervisor
    from torch.distributed import init_process_group
    from torch.nn.utils import clip_grad_norm_, clip_grad_value_
    from torch.utils.data import DataLoader
    readers = {  # path -> [(a function or class, the name it reads it by)]
        'randomness': [(Runner.set_randomness, None)],
        'env_cfg': [(Runner.setup_env, 'env_cfg')],
        'env_cfg.mp_cfg': [(set_multi_processing, None)],
        'env_cfg.dist_cfg': [
            (f, None) for f in (  # the launchers'
                init_process_group, utils.init_dist, utils._init_dist_pytorch,
                utils._init_dist_mpi, utils._init_dist_slurm)
        ],
        'auto_scale_lr': [(Runner.scale_lr, 'auto_scale_lr')],
        'optim_wrapper.clip_grad':
        [(clip_grad_value_ if node.get('type') == 'value' else clip_grad_norm_,
          None)]
    }
    if path.rpartition('.')[2].endswith('dataloader'):  # mmengine's names
        readers[path] = [(Runner.build_dataloader, 'dataloader_cfg'),
                         (DataLoader, None)]
    elif path == 'optim_wrapper.paramwise_cfg':  # its constructor's reads
        readers[path] = [
            (c, 'paramwise_cfg')
            for c in registered(cfg['optim_wrapper'].get('constructor')
                                or 'DefaultOptimWrapperConstructor')
        ]
    if path in readers:
        keys = sum((_keys_read(f, n) if n else _takes(f)
                    or tuple(inspect.signature(f).parameters)
                    for f, n in readers[path]), ())
        return keys and (readers[path][0][0].__qualname__, keys, ())
    parent = parents.get(path.rpartition('.')[0], {})
    above = registered(parent.get('type'))  # (None: no class)
    if path.endswith('.arch') and above:  # a backbone's arch_zoo entry
        keys = {
            k
            for c in above
            for a in (getattr(c, 'arch_zoo', None) or {}).values()
            if isinstance(a, dict) for k in a
        }
        return keys and (f'{above[0].__name__}.arch', tuple(sorted(keys)), ())
    kind = node.get('type', _DEFAULT_TYPES.get(path))
    if path.endswith('data_preprocessor') and kind is None and above and \
            all(issubclass(c, BaseSelfSupervisor) for c in above):
        kind = 'mmpretrain.SelfSupDataPreprocessor'  # (mmpretrain's default)
    extra = ()
    if path == 'train_cfg' and kind is None:  # mmengine's by_epoch
        kind, extra = ('EpochBasedTrainLoop' if node.get('by_epoch') else
                       'IterBasedTrainLoop'), ('by_epoch', )
    found = registered(kind)
    takes = [_takes(c) for c in found]
    if not found or None in takes:
        return None
    name = kind if isinstance(kind, str) else kind.__name__
    return name, sum(takes, extra), found


def check_config_dicts(cfg: Config) -> None:
    """Refuse, in one line naming the key path, what is close and the fix,
    a key of a config's dict that what receives the dict does not take:
    a ``type=`` dict's class (resolved through the registries of the scopes
    the config names; its constructor followed through ``**kwargs`` passed
    on), and the dicts mmengine's runner reads by key (``randomness``,
    ``env_cfg``, the loaders, ``optim_wrapper``'s ``clip_grad`` and
    ``paramwise_cfg``); an optimizer's value of another kind than its
    default (``betas=0.9``)."""
    plain = cfg.to_dict()
    parents = dict(_dicts(plain))
    scopes = {plain.get('default_scope') or 'mmpretrain'} | {
        s
        for n in parents.values()
        for s in (n.get('_scope_'), isinstance(n.get('type'), str)
                  and n['type'].rpartition('.')[0]) if s
    }
    for scope in scopes:  # its registries, its modules registered
        with suppress(ImportError):
            importlib.import_module(f'{scope}.registry')
    registries = list(all_registries())
    for registry in registries:
        if registry.scope in scopes:
            registry.import_from_location()

    def registered(kind):  # every scope's of that name: no false refusal
        bare = kind.rpartition('.')[2] if isinstance(kind, str) else None
        return [kind] if callable(kind) else list(
            dict.fromkeys(r.module_dict[bare] for r in registries
                          if bare in r.module_dict))

    for path, node in parents.items():
        who, takes, classes = _receiver(path, node, plain, registered,
                                        parents) or (None, (), ())
        bad = [k for k in node if who and k not in {*takes, *BUILDER_KEYS}]
        if bad:
            raise HPMError(no_such_key(bad[0], who, takes, path))
        if classes and all(
                inspect.isclass(c) and issubclass(c, torch.optim.Optimizer)
                for c in classes):
            params = inspect.signature(classes[0]).parameters
            for key, value in node.items():
                need = key in params and _misfit(
                    params[key].default, value, default=True)
                if need:
                    raise HPMError(
                        f'{path}.{key}={value!r}: expected {need} ({who}\'s '
                        f'default is {params[key].default!r}). Fix: {need}.')


def load_config(config: Union[str, Config], *options:
                Optional[dict]) -> Config:
    """The config a tool works from: ``config`` (a file, read and its keys
    checked, or a loaded Config, copied) with each of the ``key.sub=value``
    ``options`` dicts merged in turn (checked: :func:`merge_cfg_options`;
    the caller's dicts left as they were), its dicts checked, then its
    ``image`` spec applied and its default scope set; marked as made here
    (``HPMRunner.from_cfg`` reads any other config through here too)."""
    from mmengine.registry import init_default_scope

    from hpm_mm.datasets.image_spec import apply_image_spec
    if isinstance(config, Config):
        cfg = copy.deepcopy(config)
    elif isinstance(config, (str, os.PathLike)):
        cfg = _read_config(str(config))
        check_config_keys(cfg, str(config))
    else:
        raise HPMError(f'config={config!r} is neither a config file nor a '
                       'loaded Config. Fix: a config path.')
    for option in options:
        if option is not None and not isinstance(option, dict):
            raise HPMError(f'options {option!r}: give a dict of overrides, '
                           "e.g. {'train_cfg.max_epochs': 2}.")
        if option:  # a copy: mmengine's merge pops keys (_delete_)
            merge_cfg_options(cfg, copy.deepcopy(option))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    check_config_dicts(cfg)
    cfg = apply_image_spec(cfg)  # after the options: image.size=64 flows
    super(Config, cfg).__setattr__(_LOADED, True)
    return cfg


def is_loaded(cfg) -> bool:
    """Whether ``cfg`` is a config :func:`load_config` made (or a copy of
    one, changed or not): read and checked once."""
    return isinstance(cfg, Config) and vars(cfg).get(_LOADED, False)


def _file_names(file: str) -> dict:
    """What a config file does with names: ``set`` (name -> the line after
    which its last assignment holds), ``read`` (name -> the lines it is
    read on), ``base`` (the names it reads of its bases: ``_base_.x``,
    ``{{_base_.x}}``), ``took`` (name -> the first top-level key whose
    value read it). A json or yaml file: none."""
    text = ''
    if file.endswith('.py'):
        with open(file, encoding='utf-8') as f:
            text = f.read()
    tree = ast.parse(text, filename=file)
    out = dict(set={}, read={}, took={})
    out['base'] = set(re.findall(r'\{\{\s*_base_\.(\w+)', text))

    def visit(node, at):  # at: where the innermost statement takes effect
        if isinstance(node, ast.stmt):  # a header's (for x in ...) its line
            at = node.lineno if hasattr(node, 'body') else node.end_lineno
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out['set'][node.id] = max(out['set'].get(node.id, 0), at)
        elif isinstance(node, ast.Name):
            out['read'].setdefault(node.id, []).append(node.lineno)
        elif isinstance(node, ast.Attribute) and getattr(node.value, 'id',
                                                         '') == '_base_':
            out['base'].add(node.attr)
        for child in ast.iter_child_nodes(node):
            visit(child, at)

    visit(tree, 0)
    for stmt in (s for s in tree.body if isinstance(s, ast.Assign)):
        for n in ast.walk(stmt.value):
            if isinstance(n, ast.Name):
                out['took'].setdefault(n.id,
                                       getattr(stmt.targets[0], 'id', None))
    return out


def check_config_keys(cfg: Config, path: str) -> None:
    """Refuse, in one line, a top-level name of the config file ``path``
    whose value nothing reads (a variable is read by the lines below its
    last assignment and by the files that inherit its file, never by its
    bases, parsed before it) where it is close to a key the run reads
    (``load_fom``, ``precison``) or, in a file that inherits (a dumped
    config keeps every variable, as values nothing reads), names a
    sub-config's key (``seed = 5``, ``max_epochs = 1``: the run reads
    ``randomness.seed``, ``train_cfg.max_epochs``) or an earlier value of it
    was read (a base's dicts took the base's own: mmengine's trap)."""
    keys, plain = run_keys(), cfg.to_dict()
    files = {f: _file_names(f) for f in _config_files(path)}
    below = {f: list(_config_files(f)) for f in files}  # f and its bases
    for top in (t for t in plain if t not in keys and not t.startswith('_')):
        owner = next((f for f in files if top in files[f]['set']), path)
        mine = files[owner]
        if any(at > mine['set'].get(top, 0)
               for at in mine['read'].get(top, ())) or any(
                   top in files[f]['base']
                   for f in files if f != owner and owner in below[f]):
            continue  # read
        took = next((f for f in below[owner]
                     if top in files[f]['set'] and top in files[f]['read']),
                    None)
        key = took and files[took]['took'].get(top)
        why = unread_key(
            plain if below[path][1:] else {}, top, keys,
            cutoff=0.85) or took and (
                f'{took} read an earlier {top} into {key or "a key"}; nothing '
                f'reads this one. Fix: set {key or "that key"} = ... here')
        if why:
            where = path if owner == path else f'{path} (from {owner})'
            raise HPMError(f'{where}: {top} = ...: {why}')


def _read_config(path: str) -> Config:
    """``Config.fromfile(path)``; what stops it in one line: no config file
    (a checkpoint), a missing ``_base_``, a syntax error, a det/seg config on
    a pretraining install, the real cause of a failed ``custom_imports``
    (mmengine names ``sys.path`` instead)."""
    from hpm_mm.errors import FULL_INSTALL, MissingCompiledOpsError
    fix = 'Fix: a config file, e.g. configs/hpm/fast/hpm-fast_vit-mini-p4_' \
        '1xb256-coslr-10e_fmnist.py.'
    if '::' not in str(path) and not osp.isfile(path):
        raise HPMError(f'config {path} does not exist{_near(path)}. {fix}')
    if osp.splitext(path)[1] not in CONFIG_FILES:
        raise HPMError(f'config {path} is no config file (a checkpoint is '
                       f'load_from=...). {fix}')
    try:
        return Config.fromfile(path)
    except OSError:  # a _base_ missing or no config (the file exists)
        missing = [
            (f, n, b) for f in _config_files(path) for n, b in _bases(f)
            if not osp.isfile(b) or osp.splitext(b)[1] not in CONFIG_FILES
        ]
        if not missing:
            raise
        file, name, base = missing[0]
        why = 'is no config file' if osp.isfile(base) else \
            f'does not exist{_near(base, file)}'
        raise HPMError(
            f'{file}: its _base_ {name!r} ({base}) {why}. Fix: '
            "correct that path (relative to that file's folder).") from None
    except SyntaxError as e:
        raise HPMError(f'{_syntax_error(path, e)}. Fix: correct '
                       'the Python syntax there.') from None
    except MissingCompiledOpsError as e:
        raise HPMError(f'{path}: {e}') from None
    except ImportError as e:
        package = re.match(r'(\w+) is not installed', str(e))  # _base_ pkg::
        chain = [e]  # the causes: a custom_imports module's own, ...
        while (chain[-1].__cause__
               or chain[-1].__context__) not in (None, *chain):
            chain.append(chain[-1].__cause__ or chain[-1].__context__)
        needs = [c for c in chain if str(c).startswith('hpm_mm needs')]
        plugin = [
            c for c in chain if isinstance(c, ModuleNotFoundError) and c.name
        ]
        if package:
            why = (f'inherits from {package.group(1)}, which is not installed.'
                   f' Fix: {FULL_INSTALL}')
        elif needs:
            why = needs[0]
        elif any(c.name == 'pkg_resources' for c in plugin):
            why = ('mmengine needs pkg_resources. Fix: pip install '
                   "'setuptools<81'")
        elif plugin:  # a custom_imports module (or its own need)
            why = (f'custom_imports could not import {plugin[0].name!r}. '
                   'Fix: make it importable (PYTHONPATH, pip install).')
        else:
            raise
        raise HPMError(f'{path}: {why}') from None
