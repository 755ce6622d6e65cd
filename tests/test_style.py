"""The tree keeps the style its pre-commit hooks apply (.pre-commit-config
.yaml, settings in setup.cfg): flake8 clean, imports sorted by isort, code
formatted by yapf. A failure names the files; the fix is
``pre-commit run --all-files`` (or the isort / yapf commands below)."""
import subprocess
import sys

from conftest import REPO


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
