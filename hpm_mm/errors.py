"""hpm_mm's one exception type for a refusal."""


class HPMError(Exception):
    """A run, an evaluation or an input that hpm_mm refuses.

    Its message is one line that names the problem and the fix. Library
    code raises it and never ends the process; the tools (``tools/``) turn
    it into the line on stderr and exit code 1. Subclasses say
    what was refused, for callers that handle one case:
    :class:`~hpm_mm.engine.work_dir.WorkDirBusy`,
    :class:`~hpm_mm.engine.checkpoint.UnsafeCheckpointError`.
    """


def exit_status(prog: str, run, argv=None):
    """A tool's ``main``: ``run(argv)`` turned into an exit status, which
    the tool (``tools/*.py``), not the library, hands to the interpreter.

    An int that ``run`` returns is the status (1: a check found a
    problem); any other result is 0. An :class:`HPMError` becomes the line
    ``'<prog>: <message>'`` (given to the interpreter's exit, it is written
    to stderr with status 1). Anything else propagates with its traceback
    (a bug, not a refusal). This only returns::

        def main(argv=None):
            return exit_status('train.py', run, argv)
    """
    try:
        result = run(argv)
    except HPMError as e:
        return f'{prog}: {e}'
    return result if type(result) is int else 0
