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
