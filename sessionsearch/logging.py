"""structlog set-up, done once per process entry point: JSON lines on stderr, or nothing.

Every process configures it at its own entry (the CLI, each `serve --workers` child in
api/server.py, the Dramatiq master and each of its worker processes), so that all of them log
the one shape: a JSON object per line with `event`, `level` and `timestamp`.
"""

from __future__ import annotations

import logging
import sys
from typing import IO

import structlog
from structlog.typing import EventDict, Processor


def drop_color_message(_logger: object, _name: str, event: EventDict) -> EventDict:
    """Drop uvicorn's `color_message` extra: the same text with ANSI colour escapes, for terminals."""
    event.pop("color_message", None)
    return event


def configure(level: str | int = "INFO", *, json: bool = True, stream: IO[str] | None = None) -> None:
    """Send structlog events (and stdlib records, Dramatiq's included) as JSON lines to `stream`."""
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        numeric = logging.INFO
    stream = stream or sys.stderr
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), drop_color_message],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
