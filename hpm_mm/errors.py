"""hpm_mm's one exception type for a refusal."""


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
