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
