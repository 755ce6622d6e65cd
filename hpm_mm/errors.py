"""hpm_mm's one exception type for a refusal, and the lines that explain
what mmengine raised while building a config's parts."""
import difflib
import inspect
import re
import traceback
from contextlib import contextmanager


class HPMError(Exception):
    """A run, an evaluation or an input that hpm_mm refuses, in one line naming
    the problem and the fix; the tools turn it into that line and exit 1.
    Re-raised by torch from a dataloader worker (the worker's traceback as
    the message), it keeps its own line."""

    def __init__(self, *args) -> None:
        if args and isinstance(args[0], str) and \
                '\nOriginal Traceback' in args[0]:
            last = args[0].rstrip().splitlines()[-1]
            args = (last.split(': ', 1)[-1], ) + args[1:]
        super().__init__(*args)


#: the command that installs the full profile (mmdet, mmseg, mmcv's ops)
FULL_INSTALL = 'bash tools/install.sh full'


class MissingCompiledOpsError(HPMError, RuntimeError):
    """mmcv is importable but without its compiled ops (``mmcv._ext``); not
    an ImportError, so that mmengine's ``custom_imports`` does not wrap it
    (its own message would be the last line an mmdet/mmseg tool shows)."""


class CheckpointError(HPMError, RuntimeError):
    """A checkpoint that cannot be loaded: damaged, or refused."""


def check_fills(expected,
                state_dict: dict,
                name: str,
                fix: str,
                exact: bool = False) -> None:
    """Refuse, in one line naming the first keys and ``fix``, a
    ``state_dict`` that lacks a tensor ``expected`` holds (a model, or the
    tensors a caller reads by the file's names: its optional parts left
    out) or holds it in another shape; with ``exact``, one holding a tensor
    the model lacks too (shallower or narrower than the file's)."""
    own = expected if isinstance(expected, dict) else (
        getattr(expected, 'unsharded_state', None) or expected.state_dict())

    def few(keys):  # escaped: a file's key cannot break the line
        return ', '.join(ascii(k)[1:-1] for k in keys[:3])

    missing = [k for k in own if k not in state_dict]
    other = [
        k for k in own if k in state_dict
        and getattr(state_dict[k], 'shape', None) != own[k].shape
    ]
    extra = [k for k in state_dict if k not in own] if exact else []
    held = len(missing) == len(own) and state_dict and \
        f'; none is, the file holds e.g. {few(list(state_dict))}'
    parts = [
        f'{len(missing)} of its {len(own)} tensors are missing (e.g. '
        f'{few(missing)}{held or ""})' if missing else '',
        f'{len(other)} have another shape (e.g. {few(other[:1])}: '
        f'{tuple(getattr(state_dict[other[0]], "shape", ()))} in the file, '
        f'{tuple(own[other[0]].shape)} in the model)' if other else '',
        f'it holds {len(extra)} tensors the model lacks (e.g. {few(extra)})'
        if extra else ''
    ]
    if any(parts):
        raise CheckpointError(f'{name} does not fit the model: ' +
                              '; '.join(filter(None, parts)) +
                              f'. Fix: {fix}.')


def exit_status(prog: str, run, argv=None):
    """A tool's ``main``: ``run(argv)`` as an exit status for the tool to hand
    to the interpreter: an int result is the status, any other 0; an
    :class:`HPMError` becomes the line ``'<prog>: <message>'`` (status 1);
    anything else propagates (a bug, not a refusal)."""
    try:
        result = run(argv)
    except HPMError as e:
        return f'{prog}: {e}'
    return result if type(result) is int else 0


def all_registries():
    """Every mmengine registry: the roots and their children (mmpretrain's,
    hpm_mm's, a plugin's)."""
    import mmengine.registry as reg
    todo = [r for r in vars(reg).values() if isinstance(r, reg.Registry)]
    while todo:
        yield todo[-1]
        todo += list(todo.pop().children.values())


def did_you_mean(word: str, options, n: int = 1) -> str:
    """`` (did you mean A or B?)`` naming up to ``n`` of ``options`` close to
    ``word`` (difflib's ratio >= 0.6), or ''."""
    close = difflib.get_close_matches(word, sorted(options), n=n)
    return f' (did you mean {" or ".join(close)}?)' if close else ''


def no_such_key(key: str, who: str, takes, where: str = '') -> str:
    """The line for a config key ``key`` that ``who`` (a class, a function)
    does not take, naming the close ones among ``takes`` and all of them;
    ``where``: the key's dict (``optim_wrapper.clip_grad``)."""
    takes = [
        t for t in dict.fromkeys(takes) if t not in ('self', 'args', 'kwargs')
    ]
    close = difflib.get_close_matches(key, sorted(takes), n=2)
    fix = f'{where}.{close[0]}' if where and close else \
        'correct that key in the config (or --cfg-options)'
    return ((f'{where}.{key}: ' if where else '') +
            f'{who} takes no argument {key!r}' + did_you_mean(key, takes, 2) +
            (f'; it takes {", ".join(takes)}' if takes else '') +
            f'. Fix: {fix}.')


def unexpected_argument(error: TypeError):
    """One line for ``X.__init__() got an unexpected keyword argument 'k'``
    raised in mmengine's build (a key the config room could not check:
    a ``**kwargs`` used otherwise than passed on), naming the constructor's
    parameters close to it; None for another TypeError."""
    key = re.search(r"unexpected keyword argument '(\w+)'", text := str(error))
    names = re.findall(r'(\w+)\.__init__\(\)', text)
    if not key or not names:
        return None
    # the registered class, or the base whose __init__ it has (HPMBase)
    cls = next((b for r in all_registries() for c in r.module_dict.values()
                for b in getattr(c, '__mro__', ()) if b.__name__ == names[-1]),
               None)
    params = inspect.signature(cls.__init__).parameters if cls else ()
    return no_such_key(key.group(1), names[-1], params)


def refused_value(error: Exception):
    """One line for a ValueError or assert raised while mmengine built a
    config's part (``mask_generator.alpha_T=2``, ``lr=-1``,
    ``batch_size=0``): the class whose constructor refused and its reason;
    None for one raised outside a build (a bug keeps its traceback)."""
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)][::-1]
    obj = next((f.f_locals.get('self')
                for f in frames if f.f_code.co_name == '__init__'), None)
    built = any(f.f_code.co_name == 'build_from_cfg' for f in frames)
    why = str(error) if 'Fix:' in str(error) else \
        str(error).rstrip('.') + '. Fix: correct that value in the config.'
    return built and obj is not None and f'{type(obj).__name__}: {why}' or None


def unregistered_type(error: KeyError):
    """One line for mmengine's ``'X is not in the scope::kind registry'``
    (a type's typo, or a ``default_scope`` whose registry lacks it), naming
    the close registered names and the scopes that hold ``X``; None for
    another KeyError."""
    found = re.search(r'(\S+) is not in the (\w+)::(\w+) registry',
                      str(error.args[0] if error.args else ''))
    if not found:
        return None
    name, scope, kind = found.groups()
    kinds = [r for r in all_registries() if r.name == kind]
    holders = sorted(r.scope for r in kinds if name in r.module_dict)
    known = sorted({n for r in kinds for n in r.module_dict})
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.7)
    fix = (f"default_scope='{holders[0]}' (its {kind} registry holds it)"
           if holders else f'did you mean {" or ".join(close)}?' if close else
           'a registered type, or custom_imports that registers it')
    return (f'{name!r} is not in the {scope} scope\'s {kind} registry' +
            (f' (registered in: {", ".join(holders)})' if holders else '') +
            f'. Fix: {fix}.')


@contextmanager
def explained_build_errors():
    """A config key's typo below the top level, a type no registry of the
    scope holds, or a value a constructor refuses, as one line naming what
    is close or the reason (:func:`unexpected_argument`,
    :func:`unregistered_type`, :func:`refused_value`), where mmengine raised a
    traceback of the nested builds."""
    try:
        yield
    except (TypeError, KeyError, ValueError, AssertionError) as e:
        line = unexpected_argument(e) if isinstance(e, TypeError) else \
            unregistered_type(e) if isinstance(e, KeyError) else \
            refused_value(e)
        if line is None:
            raise
        raise HPMError(line) from None
