import logging
from contextlib import contextmanager
from typing import Iterator

from mmengine.logging import MMLogger


class _DropMessages(logging.Filter):

    def __init__(self, fragments) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f in message for f in self.fragments)


@contextmanager
def drop_log_messages(*fragments: str) -> Iterator[None]:
    """While the block runs, mmengine's current logger drops the records
    whose message contains one of ``fragments``; nothing else is touched
    (other messages, other loggers, Python warnings)."""
    logger = MMLogger.get_current_instance()
    drop = _DropMessages(fragments)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
