"""How much code one training loss runs: the files, functions, source lines
(no docstrings, comments or blanks) and conditionals of the functions of
mmpretrain and hpm_mm that one ``model.loss()`` of the tests' tiny model
calls, measured the same way for HPM and MAE (traced with
``sys.setprofile``; torch and mmengine left out).

    python .dev_scripts/loss_path.py [--out FILE.json]

Run it on another tree with that tree first on the path, e.g. for the
commit issue #57 measured (eaaf15a):

    git worktree add /tmp/old eaaf15a
    PYTHONPATH=/tmp/old python .dev_scripts/loss_path.py
"""
import argparse
import ast
import inspect
import json
import os.path as osp
import sys
import textwrap


def traced_functions(model, inputs) -> set:
    """The code objects ``model.loss(inputs, [])`` calls."""
    seen = set()

    def profile(frame, event, arg):
        if event == 'call':
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        model.loss(inputs, [])
    finally:
        sys.setprofile(None)
    return seen


def count(codes, package_dirs) -> dict:
    """files / functions / lines / conditionals of the code objects defined
    under ``package_dirs`` (a folder or a tuple of them)."""
    files, functions, lines, conditionals = set(), 0, 0, 0
    for code in codes:
        path = osp.realpath(code.co_filename)
        if not path.startswith(package_dirs) or code.co_name.startswith('<'):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(code))
        except (OSError, TypeError):
            continue
        files.add(path)
        functions += 1
        tree = ast.parse(source)
        docs = set()
        for n in ast.walk(tree):
            body = getattr(n, 'body', None)
            if isinstance(body, list) and body and isinstance(
                    body[0], ast.Expr) and isinstance(
                        getattr(body[0], 'value', None), ast.Constant):
                docs |= set(range(body[0].lineno, body[0].end_lineno + 1))
        lines += sum(
            1 for i, ln in enumerate(source.splitlines(), 1)
            if ln.strip() and not ln.strip().startswith('#') and i not in docs)
        conditionals += sum(
            isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert))
            for n in ast.walk(tree))
    return dict(
        files=len(files),
        functions=functions,
        lines=lines,
        conditionals=conditionals)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', help='write the counts to this json')
    args = parser.parse_args(argv)
    import mmpretrain
    import torch

    import hpm_mm
    sys.path.insert(
        0, osp.join(osp.dirname(osp.abspath(__file__)), '..', 'tests'))
    from helpers import tiny_hpm, tiny_mae
    dirs = (osp.dirname(osp.realpath(hpm_mm.__file__)),
            osp.dirname(osp.realpath(mmpretrain.__file__)))
    torch.manual_seed(0)
    inputs = torch.randn(4, 1, 16, 16)
    hpm = tiny_hpm(seed=0)
    hpm.train()
    hpm.set_progress(1.0)  # the teacher scores: the whole path
    mae = tiny_mae(seed=0)
    mae.train()
    result = dict(
        tree=dirs[0],
        HPM=count(traced_functions(hpm, inputs), dirs),
        MAE=count(traced_functions(mae, inputs), dirs))
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == '__main__':
    main()
