"""Console and log filters: records dropped while a block runs, a quiet
run's console, and the bare console lines of a tool."""
import logging
from contextlib import contextmanager
from typing import Iterator

from mmengine.logging import MMLogger


@contextmanager
def drop_log_messages(*fragments: str) -> Iterator[None]:
    """While the block runs, mmengine's current logger drops the records
    whose message contains one of ``fragments``; nothing else is touched
    (other messages, other loggers, Python warnings)."""
    logger = MMLogger.get_current_instance()

    def drop(record: logging.LogRecord) -> bool:
        return not any(f in record.getMessage() for f in fragments)

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def quiet_console(record: logging.LogRecord) -> bool:
    """The console filter of a quiet run: warnings, errors and the records
    logged with ``extra=dict(console=True)`` (the precision line, the
    per-epoch lines)."""
    return record.levelno >= logging.WARNING or getattr(
        record, 'console', False)


class BareConsoleFormatter(logging.Formatter):
    """The console's format, except for the records logged with
    ``extra=dict(console=True)``: their bare message, as a tool's own
    line."""

    def __init__(self, base: logging.Formatter) -> None:
        super().__init__()
        self.base = base

    def format(self, record: logging.LogRecord) -> str:
        bare = getattr(record, 'console', False) and \
            record.levelno < logging.WARNING
        return record.getMessage() if bare else self.base.format(record)
