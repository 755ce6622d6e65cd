"""The config room: a run's config loaded (a file or a loaded Config) and
changed with one clear line for what cannot work: a syntax error, a
missing package, an option nothing reads. Every tool, ``hpm_mm.apis`` and
the runner (``RUNNERS.build`` users too) read a config through
:func:`load_config`."""
import copy
import os
import os.path as osp
import re
from typing import Any, Optional, Union

from mmengine.config import Config

from hpm_mm.errors import HPMError, did_you_mean

_MISSING = object()
_KINDS = {bool: 'True or False', int: 'a whole number', float: 'a number'}


def _step(node: Any, part: str) -> Any:
    """One level down a config: a list's element by index, a dict's
    value by key; ``_MISSING`` where there is none."""
    if isinstance(node, (list, tuple)) and part.isdigit() and \
            int(part) < len(node):
        return node[int(part)]
    return node[part] if isinstance(node, dict) and part in node else _MISSING


def _lookup(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split('.'):
        node = _step(node, part)
        if node is _MISSING:
            break
    return node


def _fits(old: Any, new: Any) -> bool:
    """Whether ``new`` may replace the config's ``old``: a bool by a bool,
    an int by an int, a float by a number; anything else by anything."""
    if new is None or type(old) not in _KINDS:
        return True
    return isinstance(new, (int, float) if type(old) is float else
                      type(old)) and (type(old) is bool) == (
                          type(new) is bool)


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
    import inspect

    from mmengine.runner import FlexibleRunner, Runner

    from hpm_mm.errors import all_registries
    keys = set(CONFIG_KEYS)
    for runner in (Runner, FlexibleRunner):
        keys |= set(inspect.signature(runner.__init__).parameters) - {'self'}
    for registry in all_registries():
        for cls in registry.module_dict.values():
            keys |= set(getattr(cls, 'config_keys', ()))
    return frozenset(keys)


def _leaves(node, prefix='') -> dict:
    """``key -> dotted path`` of every nested dict key of a config (its
    shallowest path), top level left out."""
    out = {}
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, (list, tuple)) else ()
    for k, v in items:
        path = f'{prefix}.{k}' if prefix else str(k)
        found = _leaves(v, path)
        if prefix and isinstance(k, str):
            found[k] = path
        for leaf, where in found.items():
            if where.count('.') < out.get(leaf, where + '.').count('.'):
                out[leaf] = where
    return out


def unread_key(cfg: dict,
               top: str,
               keys: frozenset,
               rest: str = '',
               option: bool = True) -> Optional[str]:
    """Why the top-level ``top`` of ``cfg`` is a mistake, or None: nothing
    reads it and it is close to a key the run reads, or (an ``option``)
    names a key of a sub-config (``seed`` is read as ``randomness.seed``;
    in a file such a name may be a variable: mmengine's dumped configs
    keep them)."""
    import difflib
    if top in keys or top.startswith('_'):
        return None
    leaves = _leaves(cfg)
    if top in leaves:
        return (f'the run reads {top!r} only as {leaves[top]}, not at the '
                f'top level. Fix: {leaves[top]}=...') if option else None

    def near(names):
        return difflib.get_close_matches(
            top, sorted(names), n=1, cutoff=0.8 if option else 0.85)

    close = [c + rest for c in near(keys)] or [leaves[c] for c in near(leaves)]
    if close:
        return f'nothing reads {top!r}. Fix: did you mean {close[0]}?'
    return None


def _check_top_level(cfg: dict, key: str, keys: frozenset) -> None:
    """Refuse an option whose top-level key nothing reads, in one line."""
    top = key.split('.')[0]
    if top in keys:
        return
    why = unread_key(cfg, top, keys, key[len(top):]) or (
        f'nothing reads {top!r} (a variable of the config file is used '
        'only while the file is parsed). Fix: set a key the run reads '
        '(a plugin that reads a top-level key of its own declares it: '
        'config_keys = (...) on its registered class)')
    raise HPMError(f'--cfg-options {key}=...: {why}')


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
            where = '.'.join(parts[:i])
            if len(hits) != 1:
                types = [i.get('type') for i in node if isinstance(i, dict)]
                raise HPMError(
                    f'--cfg-options {key}: {where} has '
                    f'{"no" if not hits else len(hits)} element(s) of type '
                    f'{part!r} (its types: {types}). Fix: name one of '
                    f'those types, or the element\'s index ({where}.0, ...).')
            parts[i] = part = str(hits[0])
        node = _step(node, part)
        if node is _MISSING:
            break
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
    for key in options:
        _check_top_level(current, key, keys)
    for key, value in options.items():
        old = _lookup(current, key)
        if not _fits(old, value):
            kind = _KINDS[type(old)]
            raise HPMError(
                f'--cfg-options {key}={value!r}: expected {kind} (the '
                f'config has {old!r}).')
    cfg.merge_from_dict(options)
    return cfg


def _config_files(path: str, seen: Optional[set] = None):
    """``path`` and the files its ``_base_`` names, each once, as mmengine
    resolves them (relative ones from its folder, ``pkg::`` ones in that
    package; a package not installed is left out: it is not the syntax).
    A file's bases are read only once the caller has taken the file."""
    seen = set() if seen is None else seen
    if not osp.isfile(path) or osp.realpath(path) in seen:
        return
    seen.add(osp.realpath(path))
    yield path
    for name in Config._get_base_files(path):
        try:
            base = Config._get_cfg_path(name, path)[0]
        except Exception:
            continue
        yield from _config_files(base, seen)


def syntax_error(path: str, error: SyntaxError) -> str:
    """Where a config's syntax error is: the file (``path`` or the
    ``_base_`` it inherits that holds it) and line (mmengine names a
    temporary copy of the file, or none)."""
    import ast
    for file in _config_files(path):
        try:
            with open(file, encoding='utf-8') as f:
                ast.parse(f.read(), filename=file)
        except SyntaxError as e:
            text = (e.text or '').strip()
            return (f'{file}, line {e.lineno}: {e.msg}' +
                    (f': {text}' if text else '') +
                    (f' (inherited by {path})' if file != path else ''))
    return f'a syntax error in {path} or a file it inherits ({error})'


def load_config(config: Union[str, Config], *options:
                Optional[dict]) -> Config:
    """The config a tool works from: ``config`` (a file, read and its keys
    checked, or a loaded Config, copied) with each of the ``key.sub=value``
    ``options`` dicts merged in turn (checked: :func:`merge_cfg_options`;
    the caller's dicts left as they were), then its
    ``image`` spec applied (the one place: ``HPMRunner.from_cfg`` reads a
    config through here too) and its default scope set."""
    from mmengine.registry import init_default_scope

    from hpm_mm.datasets.image_spec import apply_image_spec
    if isinstance(config, Config):
        cfg = copy.deepcopy(config)
    elif isinstance(config, (str, os.PathLike)):
        cfg = _read_config(str(config))
        check_config_keys(cfg, str(config))
    else:
        raise HPMError(
            f'config={config!r} ({type(config).__name__}) is neither a config '
            'file nor a loaded Config. Fix: a config path, or '
            'mmengine.Config.fromfile(path).')
    for option in options:
        if option is not None and not isinstance(option, dict):
            raise HPMError(
                f'options {option!r} ({type(option).__name__}): give a dict '
                "of overrides, e.g. {'train_cfg.max_epochs': 2}.")
        if option:  # a copy: mmengine's merge pops keys (_delete_)
            merge_cfg_options(cfg, copy.deepcopy(option))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    return apply_image_spec(cfg)  # after the options: image.size=64 flows


def _names_read(path: str) -> set:
    """The names a config file and the files it inherits read while they
    are parsed (its variables in use)."""
    import ast
    names = set()
    for file in _config_files(path):
        with open(file, encoding='utf-8') as f:
            tree = ast.parse(f.read(), filename=file)
        names |= {
            n.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
    return names


def check_config_keys(cfg: Config, path: str) -> None:
    """Refuse, in one line, a top-level key of the config file ``path`` that
    nothing reads and that is close to a key the run reads (``load_fom``,
    ``precison``, ``max_epoch``); a variable the files use while parsed
    stays legal."""
    keys, used = run_keys(), _names_read(path)
    plain = cfg.to_dict()
    for top in plain:
        if top in used:
            continue
        why = unread_key(plain, top, keys, option=False)
        if why:
            raise HPMError(f'{path}: {top} = ...: {why}')


def _read_config(path: str) -> Config:
    """``Config.fromfile(path)``, a det/seg config's failure on a pretraining
    install in one line: a ``_base_`` of a missing package, or the real cause
    of a failed ``custom_imports`` (mmengine names ``sys.path`` instead)."""
    from hpm_mm.errors import FULL_INSTALL, MissingCompiledOpsError
    if '::' not in str(path) and not osp.isfile(path):
        near = ''
        folder = osp.dirname(path) or '.'
        if osp.isdir(path):
            near = ' as a file: it is a folder'
        elif osp.isdir(folder):
            near = did_you_mean(osp.basename(path), os.listdir(folder))
        raise HPMError(f'config {path} does not exist{near}. Fix: a config '
                       'file path, e.g. configs/hpm/fast/hpm-fast_vit-mini-'
                       'p4_1xb256-coslr-10e_fmnist.py.')
    try:
        return Config.fromfile(path)
    except SyntaxError as e:
        raise HPMError(f'{syntax_error(path, e)}. Fix: correct '
                       'the Python syntax there.') from None
    except MissingCompiledOpsError as e:
        raise HPMError(f'{path}: {e}') from None
    except ImportError as e:
        # a ``_base_ = 'mmdet::...'`` whose package is missing
        missing = re.match(r'(\w+) is not installed', str(e))
        if missing:
            raise HPMError(
                f'{path}: inherits from {missing.group(1)}, which is not '
                "installed (the pretraining profile has no mmdet, mmseg or "
                f"mmcv's compiled ops). Fix: {FULL_INSTALL}") from None
        cause, seen, plugin = e, set(), None
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            if isinstance(cause, ImportError) and \
                    str(cause).startswith('hpm_mm needs'):
                raise HPMError(f'{path}: {cause}') from None
            if getattr(cause, 'name', None) == 'pkg_resources':
                import setuptools
                raise HPMError(
                    f'{path}: mmengine 0.10.7 needs pkg_resources, which '
                    f'setuptools {setuptools.__version__} lacks. Fix: pip '
                    "install 'setuptools<81'") from None
            if isinstance(cause, ModuleNotFoundError) and cause.name:
                plugin = plugin or cause
            cause = cause.__cause__ or cause.__context__
        if plugin is not None:  # a custom_imports module (or its own need)
            raise HPMError(
                f'{path}: custom_imports could not import {plugin.name!r} '
                f'({plugin}). Fix: make it importable (PYTHONPATH, pip '
                'install), or drop it from custom_imports.') from None
        raise
