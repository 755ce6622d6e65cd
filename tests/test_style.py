"""The tree keeps the style its pre-commit hooks apply (.pre-commit-config
.yaml, settings in setup.cfg): flake8 clean, imports sorted by isort, code
formatted by yapf. A failure names the files; the fix is
``pre-commit run --all-files`` (or the isort / yapf commands below)."""
import subprocess
import sys

from helpers import REPO


def python_files():
    out = subprocess.run(['git', 'ls-files', '*.py'],
                         cwd=REPO,
                         capture_output=True,
                         text=True,
                         check=True).stdout.split()
    assert out, 'git ls-files found no Python files'
    return out


def check(*cmd):
    proc = subprocess.run([sys.executable, '-m', *cmd],
                          cwd=REPO,
                          capture_output=True,
                          text=True)
    assert proc.returncode == 0, (
        f'{" ".join(cmd[:2])} found style slips (fix: '
        'pre-commit run --all-files):\n' + (proc.stdout + proc.stderr)[-3000:])


def test_flake8_clean():
    check('flake8', '.')


def test_imports_sorted_by_isort():
    check('isort', '--settings-path', 'setup.cfg', '--check-only', '--quiet',
          *python_files())


def test_formatted_by_yapf():
    check('yapf', '--diff', *python_files())


#: hpm_mm's layers, lowest first: a module imports its own layer or lower
LAYERS = [
    {'errors', 'registry', 'version'},
    {'models', 'datasets', 'evaluation', 'visualization', 'testing'},
    {'engine'},
    {'compat', 'apis'},
    {'det', 'seg', '__init__'},
]


def _imports(path: str, module: str):
    """The hpm_mm modules ``path`` imports, at any depth of its code."""
    import ast
    with open(path) as f:
        tree = ast.parse(f.read())
    package = module.split('.')
    if not path.endswith('__init__.py'):
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                yield '.'.join(base + ([node.module] if node.module else []))
            else:
                yield node.module or ''
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_no_module_imports_a_higher_layer():
    import os
    import os.path as osp
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    up = []
    for root, _, files in os.walk(osp.join(REPO, 'hpm_mm')):
        for f in files:
            if not f.endswith('.py'):
                continue
            path = osp.join(root, f)
            module = osp.relpath(path, REPO)[:-3].replace(os.sep, '.')
            parts = module.split('.')
            own = parts[1] if len(parts) > 2 or f != '__init__.py' and \
                len(parts) > 1 else '__init__'
            own = own if own in layer else parts[1]
            for name in _imports(path, module):
                if not name.startswith('hpm_mm.'):
                    continue
                target = name.split('.')[1]
                assert target in layer, f'{target} has no layer in LAYERS'
                if layer[target] > layer[own]:
                    up.append(f'{module} imports {name}')
    assert not up, 'imports of a higher layer:\n' + '\n'.join(up)


def _module_graph() -> dict:
    """hpm_mm's modules -> the hpm_mm modules each imports, at any depth
    of its code (a function's lazy import too), package ``__init__`` files
    left out (a package re-exports its modules, which import their
    siblings by name)."""
    import os
    import os.path as osp
    modules = {}
    for root, _, files in os.walk(osp.join(REPO, 'hpm_mm')):
        for f in files:
            if f.endswith('.py') and f != '__init__.py':
                path = osp.join(root, f)
                module = osp.relpath(path, REPO)[:-3].replace(os.sep, '.')
                modules[module] = path
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(path, module):
            while name and name not in modules:  # `from pkg.mod import f`
                name = name.rpartition('.')[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def test_no_import_circle_lazy_imports_included():
    """No two modules import each other, directly or around a longer loop,
    counting the imports inside functions (a circle closed lazily is still
    a circle: #72 found engine/download <-> engine/safe_load)."""
    graph = _module_graph()
    circles, state = [], {}

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 'open':
                circles.append(' -> '.join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 'done'

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, 'import circles:\n' + '\n'.join(circles)


def test_every_registered_constructor_has_an_args_block():
    """Every class hpm_mm registers (the algorithms, necks, heads, losses,
    mask generators, teachers, score sources, preprocessors, transforms,
    hooks, optimizer wrappers, runners, det/seg modules) documents each
    ``__init__`` argument a config sets in an ``Args:`` block, as
    mmpretrain's do: the reference a config user reads. A class without its
    own ``__init__`` is read with the one it inherits, documented where that
    one is (``HPM``'s and ``HPMSimMIM``'s in ``HPMBase``: it went
    unchecked); one inherited from a library is the library's to
    document."""
    import inspect
    import re

    import hpm_mm  # noqa: F401
    from hpm_mm.errors import all_registries
    try:
        import hpm_mm.det  # noqa: F401
        import hpm_mm.seg  # noqa: F401
    except Exception:  # (the pretraining profile)
        pass
    lacking = {}
    for registry in all_registries():
        for cls in registry.module_dict.values():
            # the class that defines the constructor cls runs (a function:
            # object, none of hpm_mm's)
            owner = next(
                c for c in getattr(cls, '__mro__', (object, ))
                if '__init__' in vars(c))
            if not (cls.__module__.startswith('hpm_mm')
                    and owner.__module__.startswith('hpm_mm')):
                continue
            params = [
                p.name
                for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != 'self' and p.kind not in (p.VAR_POSITIONAL,
                                                       p.VAR_KEYWORD)
            ]
            doc = (cls.__doc__ or '') + (owner.__doc__ or '') + (
                cls.__init__.__doc__ or '')
            args = doc.partition('Args:')[2]
            missing = [
                p for p in params
                if not re.search(rf'^\s+{re.escape(p)}( \(|:)', args, re.M)
            ]
            if missing:
                lacking[cls.__name__] = missing
    assert not lacking, f'Args: blocks lacking: {lacking}'


def test_the_slow_files_that_start_first_exist():
    """tests/conftest.py's order names files: a renamed one would silently
    fall back to running late."""
    import os.path as osp

    from conftest import SLOW
    assert SLOW and all(osp.isfile(osp.join(REPO, 'tests', f))
                        for f in SLOW), SLOW
