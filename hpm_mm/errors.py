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


def tool_main(run, argv=None, name: str = 'hpm_mm'):
    """The ``main`` of every tool: ``run(argv)``, its refusal
    (:class:`HPMError`) ended as ``name: message`` on stderr and exit 1."""
    try:
        return run(argv)
    except HPMError as e:  # the library's one-line refusal: exit 1
        raise SystemExit(f'{name}: {e}') from None
