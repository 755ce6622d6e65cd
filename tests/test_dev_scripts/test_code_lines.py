""".dev_scripts/code_lines.py: the AST count the size budgets use."""
import sys

from helpers import REPO


def test_code_lines_leave_out_docstrings_comments_and_blanks():
    sys.path.insert(0, f'{REPO}/.dev_scripts')
    try:
        from code_lines import code_lines
    finally:
        sys.path.pop(0)
    src = ('"""Module doc,\ntwo lines."""\nimport os  # a comment\n\n'
           '# a comment line\nclass A:\n    """Doc."""\n\n'
           '    def f(self):\n        """Doc\n        more."""\n'
           "        raise ValueError('a message '\n"
           "                         'on two lines')\n")
    assert code_lines(src) == 5  # import, class, def, the raise's 2 lines
