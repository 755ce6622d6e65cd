"""Every script the README and docs name exists and answers --help on this
install (a stale name, like a driver that moved, fails here), and every
shell script they name parses."""
import glob
import os.path as osp
import re
import subprocess

import pytest
from helpers import REPO, process, tool_main

PAGES = ['README.md', 'configs/hpm/README.md'] + sorted(
    osp.relpath(p, REPO) for p in glob.glob(osp.join(REPO, 'docs', '*.md')))
# (not a path after ``git show REV:``: an earlier commit's file)
SCRIPT = re.compile(r'(?<![\w/.:])((?:tools|\.dev_scripts|projects)/'
                    r'[\w./-]+\.(?:py|sh))')


def named_scripts():
    found = {}
    for page in PAGES:
        for path in SCRIPT.findall(open(osp.join(REPO, page)).read()):
            found.setdefault(path, page)
    return sorted(found.items())


def test_the_pages_name_scripts():
    names = dict(named_scripts())
    assert 'tools/train.py' in names and 'tools/install.sh' in names
    assert '.dev_scripts/fmnist_study/report.py' in names


@pytest.mark.parametrize('path,page', named_scripts())
def test_each_named_script_exists_and_answers_help(path, page, warm):
    full = osp.join(REPO, path)
    assert osp.isfile(full), f'{page} names {path}, which does not exist'
    if path.endswith('.sh'):
        proc = subprocess.run(['bash', '-n', full],
                              capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
        return
    if path.startswith('projects/') or 'configs/' in path:
        return  # modules and configs, not commands
    proc = tool_main(path[len('tools/'):],
                     '--help') if path.startswith('tools/') else process(
                         path, '--help', python=warm)
    assert proc.returncode == 0, f'{page}: {path} --help:\n' + \
        (proc.stdout + proc.stderr)[-2000:]
    assert 'usage:' in proc.stdout
