"""Every measured figure the README and the docs state is a table generated
from its record (.dev_scripts/generate_readme.py): a stale block fails
here, and so does a timing typed by hand outside the blocks."""
import glob
import importlib.util
import os.path as osp
import re

import pytest
from helpers import REPO

PAGES = ['README.md'] + sorted(
    osp.relpath(p, REPO)
    for p in glob.glob(osp.join(REPO, 'configs', '*', 'README.md')) +
    glob.glob(osp.join(REPO, 'docs', '*.md')))
# a number with a unit of time or rate, a speed-up (2.23x) or a signed
# percentage (+33%)
TIMING = re.compile(
    r'(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s?-\s?\d[\d,]*(?:\.\d+)?)?\s?'
    r'(?:ms|us|µs|s|sec|seconds?|min|minutes?|h|hours?|img/s|images/s|'
    r'GFLOP/s|TFLOP/s)(?![\w/])'
    r'|(?<![\w.])\d+(?:\.\d+)?x(?!\w)'
    r'|(?<![\w.])[+-]\d+(?:\.\d+)?%')
# definitions, not measurements: (page, phrase, why)
ALLOWED = [
    ('docs/gpu.md', 'under 10 minutes', "a lent card's limit per command"),
    ('docs/transfer.md', 'COCO 1x', "the 12-epoch schedule's name"),
    ('docs/transfer.md', 'a 4x repeated COCO', "mmdet's dataset wrapper"),
]


def _generator():
    spec = importlib.util.spec_from_file_location(
        'generate_readme', osp.join(REPO, '.dev_scripts',
                                    'generate_readme.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def typed_timings(page, text, blocks):
    """The timings in ``text`` outside its generated blocks and the
    allowed phrases, as 'page:line: figure'."""
    for begin, end in blocks:
        text = re.sub(
            re.escape(begin) + '.*?' + re.escape(end),
            lambda m: '\n' * m.group(0).count('\n'),
            text,
            flags=re.S)
    for where, phrase, _ in ALLOWED:
        if where == page:
            text = text.replace(phrase, '')
    return [
        f'{page}:{i}: {m.group(0)}'
        for i, line in enumerate(text.splitlines(), 1)
        for m in TIMING.finditer(line)
    ]


@pytest.fixture(scope='module')
def g():
    return _generator()


def test_no_generated_block_is_stale(g):
    stale = g.stale()
    assert not stale, ('stale blocks (run python .dev_scripts/'
                       f'generate_readme.py): {stale}')
    assert {page
            for page, _, _ in g.BLOCKS.values()} >= {
                'README.md', 'docs/speed.md', 'docs/install.md', 'docs/gpu.md',
                'configs/hpm/README.md'
            }


def test_no_timing_is_typed_outside_the_generated_blocks(g):
    found = []
    for page in PAGES:
        marks = [m for p, _, m in g.BLOCKS.values() if p == page]
        found += typed_timings(page, open(osp.join(REPO, page)).read(), marks)
    assert not found, ('timings typed by hand (make each a record in '
                       'docs/results/ and a generated table, docs/speed.md'
                       '#records):\n' + '\n'.join(found))
    for page, phrase, _ in ALLOWED:
        assert phrase in open(osp.join(REPO, page)).read(), (page, phrase)


@pytest.mark.parametrize('line', [
    'the CPU step (about 2 s)', '9 min 3 s in all', 'a 749-782 TFLOP/s card',
    '11,372 images/s', '160 GFLOP/s', 'HPM +33% at batch 256', 'x MAE 2.23x',
    '0.97-1.25 s per step', 'took 3 h', '8.8 min'
])
def test_the_rule_sees_a_typed_timing(line):
    assert typed_timings('docs/x.md', line, []), line


@pytest.mark.parametrize('line', [
    'configs/hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py',
    '10 epochs of 10k images, 400 steps', 'fine-tune 1% / 10%', '2 cores',
    'forward x3', 'k=10: 77.76', 'the COCO 1x schedule'
])
def test_the_rule_leaves_other_numbers(line):
    assert not typed_timings('docs/transfer.md', line, []), line
