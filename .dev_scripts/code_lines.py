"""hpm_mm's code lines: non-blank, non-comment lines outside docstrings
(raise messages count), by an AST count, per file and in all; with
``--since REV`` each file's growth since that commit.

    python .dev_scripts/code_lines.py [--since REV] [--top 15]
"""
import argparse
import ast
import os
import os.path as osp
import subprocess

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def code_lines(src: str) -> int:
    """Lines of ``src`` that are neither blank, a comment, nor in a
    docstring (a module's, class's or function's first string)."""
    tree, doc = ast.parse(src), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(
                    first.value, ast.Constant) and isinstance(
                        first.value.value, str):
                doc.update(range(first.lineno, first.end_lineno + 1))
    return sum(
        1 for i, line in enumerate(src.splitlines(), 1)
        if line.strip() and not line.strip().startswith('#') and i not in doc)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--since', help='a commit to compare with')
    parser.add_argument('--top', type=int, default=15)
    args = parser.parse_args(argv)
    rows = []
    for root, _, files in os.walk(osp.join(ROOT, 'hpm_mm')):
        for f in files:
            if f.endswith('.py'):
                path = osp.join(root, f)
                rel = osp.relpath(path, ROOT)
                with open(path) as fh:
                    now = code_lines(fh.read())
                then = 0
                if args.since:
                    old = subprocess.run(
                        ['git', 'show', f'{args.since}:{rel}'],
                        cwd=ROOT,
                        capture_output=True,
                        text=True)
                    then = code_lines(old.stdout) if old.returncode == 0 \
                        else 0
                rows.append((now, now - then, rel))
    total = sum(r[0] for r in rows)
    growth = sum(r[1] for r in rows)
    print(f'hpm_mm/: {total} code lines' +
          (f' ({growth:+d} since {args.since})' if args.since else ''))
    key = (lambda r: r[1]) if args.since else (lambda r: r[0])
    for now, delta, rel in sorted(rows, key=key, reverse=True)[:args.top]:
        print(f'  {now:5d} {delta:+5d}  {rel}' if args.
              since else f'  {now:5d}  {rel}')
    return total


if __name__ == '__main__':
    main()
