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


def access_fields(_logger: object, _name: str, event: EventDict) -> EventDict:
    """uvicorn's access line as fields too (method, path, status, client), for a collector to filter
    on; the other records' format arguments are in their `event` already, and dropped."""
    args, record = event.pop("positional_args", None), event.get("_record")
    if record is not None and record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
        client, method, path, _version, status = args
        event.update(method=method, path=path, status=status, client=client)
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
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), drop_color_message, access_fields],
        pass_foreign_args=True,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
