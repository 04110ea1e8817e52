"""Import of the gateway's legacy state dir: sessions.json plus one JSONL transcript per window.

Rows are bulk-written without indexing, so every imported window is marked for reconciliation.
Bad lines are reported with file and line number and skipped; everything valid is kept, and no
line, entry or file can cost more than itself. Each window records how many lines of its file
were consumed, so a second run adds nothing and a file that grew since adds only its tail.
What is read, and what is refused, is import_plan's part.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from .errors import InvalidRequest, Unavailable
from .import_plan import ImportJob, Problem, Source, describe_error, entry_meta, open_checked, plan_import, shown
from .indexer.versions import Migration
from .session_meta import check_meta
from .store.base import AgentStore, AppendResult
from .transcript.events import ROLES, Event, parse_event

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["FileReport", "ImportReport", "Problem", "plan_import", "run_import"]

log = structlog.get_logger("sessionsearch.import")

BATCH_EVENTS = 5000
# A longer line is skipped unparsed, read past in chunks: a file without newlines must not take
# the memory. Far above any transcript row (the HTTP API refuses bodies over 8 MiB by default).
MAX_LINE_BYTES = 64 << 20
# While a write to a database server is in flight the parse hands the event loop a turn every this
# many lines (~0.2 ms of parsing), so the write's round trips are answered while the next chunk is
# parsed rather than after it.
YIELD_LINES = 10


@dataclass
class FileReport:
    """What became of one transcript file."""

    file: str
    session_key: str
    session_id: str
    lines: int = 0
    imported: int = 0
    skipped_lines: int = 0  # lines already imported by an earlier run
    duplicates: int = 0
    bad: int = 0


@dataclass
class ImportReport:
    """An import's outcome: per file, every problem met, and notes on where things went."""

    files: list[FileReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)  # imported, but not where a reader might expect
    sessions: int = 0
    seconds: float = 0.0

    @property
    def events(self) -> int:
        return sum(f.imported for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions, "events": self.events, "seconds": round(self.seconds, 3),
            "eventsPerSecond": round(self.events / self.seconds) if self.seconds else None,
            "files": [vars(f) for f in self.files],
            "problems": [p.to_dict() for p in self.problems],
            "notes": [n.to_dict() for n in self.notes],
        }


READ_BYTES = 1 << 20
BOM = b"\xef\xbb\xbf"


def _line_end(buf: bytearray, scan: int) -> tuple[int, int] | None:
    """Where the first line end at or after `scan` starts and ends: LF, CRLF, or CR alone (the
    line ends a transcript may have). Two finds, not a regex: this runs once a line."""
    lf = buf.find(b"\n", scan)
    cr = buf.find(b"\r", scan, len(buf) if lf < 0 else lf)
    if cr < 0:
        return None if lf < 0 else (lf, lf + 1)
    return (cr, cr + 2) if lf == cr + 1 else (cr, cr + 1)


def _lines(source: Source, failed: list[OSError]) -> Iterator[tuple[bytes | None, int, bool]]:
    """Each line of the file without its end (LF, CRLF or CR), its size in bytes with it, and
    whether it had one; None for a line over MAX_LINE_BYTES, read past and never held whole.
    A read that fails ends the lines and lands in `failed`."""
    limit = MAX_LINE_BYTES
    try:
        with open_checked(source) as fh:
            buf = bytearray()
            scan = 0  # where in `buf` a line end may still be found
            passed = 0  # bytes of an over-long line read past so far
            while True:
                chunk = fh.read(READ_BYTES)
                buf += chunk
                start = 0
                while (end := _line_end(buf, scan)) is not None:
                    at, after = end
                    if chunk and after == len(buf) and buf[at] == 0x0D:
                        break  # a CR that the next read may show to be a CRLF
                    if passed or at - start > limit:
                        yield None, passed + after - start, True
                        passed = 0
                    else:
                        yield bytes(buf[start:at]), after - start, True
                    start = scan = after
                del buf[:start]
                scan = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
                if not chunk:
                    if buf or passed:
                        yield (None if passed else bytes(buf)), passed + len(buf), False
                    return
                if len(buf) > limit:
                    keep = 1 if buf.endswith(b"\r") else 0  # it may end the line
                    passed += len(buf) - keep
                    del buf[:len(buf) - keep]
                    scan = 0
    except OSError as exc:
        failed.append(exc)


def _parse_line(raw: bytes | None, now_ms: int, migration: Migration) -> Event | str:
    """The event on one line, read as its version's migration makes it, or what is wrong with it
    (no line can raise past this)."""
    if raw is None:
        return f"longer than {MAX_LINE_BYTES} bytes; skipped"
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return describe_error(exc)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {describe_error(exc)}"
    source: str | None = None if migration.see(value) else text  # a migrated entry is stored as migrated
    try:
        return parse_event(value, "event", now_ms=now_ms, source=source)
    except InvalidRequest as exc:
        return exc.message.removeprefix("event").lstrip(".: ") or exc.message
    except Exception as exc:  # noqa: BLE001 - a line the rules did not foresee costs only itself
        return f"not imported: {type(exc).__name__}: {exc}"


def _seen(raw: bytes | None, migration: Migration) -> None:
    """A line an earlier import took: seen again only for the positions and version it gives."""
    if raw is None or not raw.strip() or not migration.counts_positions:
        return
    try:
        migration.see(json.loads(raw.decode("utf-8")))
    except (ValueError, RecursionError):
        pass  # not an entry: the runtime skips it too


async def run_import(engine: Engine, path: Path, *, agent_id: str | None = None,
                     progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import `path` into `engine`; returns what was imported and every problem met.

    A file's rows go to the writer in chunks while the next chunk is parsed (when the write waits
    on a server, the parse gives the event loop a turn every YIELD_LINES lines so that the write
    progresses); the last chunk of each file waits in a group with other files' until the group
    is worth a transaction.
    """
    started = time.monotonic()
    plan = plan_import(Path(path), agent_id, index_max_bytes=engine.settings.import_index_max_mib << 20)
    report = ImportReport(problems=plan.problems, notes=plan.notes)
    total_bytes = sum(_size(j.path) for j in plan.jobs if j.path is not None) or 1
    done_bytes = 0
    consumed_by_agent: dict[str, dict[str, int]] = {}
    group = _Group(report)
    for job in plan.jobs:
        store = await engine.store(job.agent_id, create=True)
        if group.store is not store:
            await group.flush()
            group.store = store
        if job.agent_id not in consumed_by_agent:
            consumed_by_agent[job.agent_id] = await store.all_source_lines()
        fields = entry_meta(job, report.problems)
        report.sessions += 1
        if job.path is None or job.source is None:
            window = {"sessionId": job.session_id} if job.window else {}
            await store.upsert_session(job.session_key, {**fields, **window})
            continue
        meta: dict[str, Any] | None = fields
        file_report = FileReport(shown(job.path), job.session_key, job.session_id)
        report.files.append(file_report)
        consumed = consumed_by_agent[job.agent_id].get(job.session_id, 0)
        events: list[Event] = []
        event_lines: list[int] = []
        now_ms = int(time.time() * 1000)
        line_no = 0
        failed: list[OSError] = []
        migration = Migration(job.session_id)
        name: str | None = None  # the latest session_info name, the runtime's session name
        unknown_roles: dict[str, list[int]] = {}  # role: [lines, first line]
        for line_no, (raw, size, ended) in enumerate(_lines(job.source, failed), 1):
            done_bytes += size
            if not line_no % YIELD_LINES and group.writing and store.writes_await_server:
                await asyncio.sleep(0)
            if line_no == 1 and raw is not None:
                raw = raw.removeprefix(BOM)
            if line_no <= consumed:
                file_report.skipped_lines += 1
                _seen(raw, migration)
                continue
            if raw is not None and not raw.strip():
                continue
            event = _parse_line(raw, now_ms, migration)
            if isinstance(event, str):
                if raw is not None and not ended and event.startswith(("not JSON", "not UTF-8")):
                    # the gateway may still be writing this line: leave it for the next import
                    report.problems.append(Problem(job.path, line_no, "incomplete last line (no newline "
                                                   "at the end); left for the next import"))
                    line_no -= 1
                    break
                file_report.bad += 1
                report.problems.append(Problem(job.path, line_no, event))
                continue
            if event.role is not None and event.role not in ROLES:
                unknown_roles.setdefault(event.role, [0, line_no])[0] += 1
            elif event.type == "session_info":
                name = _session_name(event.body, name)
            events.append(event)
            event_lines.append(line_no)
            if len(events) >= BATCH_EVENTS:  # a chunk of a big file
                await group.send([_Step(job, meta, events, event_lines, line_no, file_report)])
                meta, events, event_lines = None, [], []
                if progress:
                    progress(done_bytes, total_bytes)
        if failed:  # what was read before the failure is still written
            report.problems.append(Problem(job.path, line_no + 1 if line_no else None,
                                           f"unreadable: {describe_error(failed[0])}; "
                                           f"{'rest of the file skipped' if line_no else 'skipped'}"))
        file_report.lines = line_no
        for role, (count, first) in unknown_roles.items():
            report.notes.append(Problem(job.path, first, f"message role {role!r} is not one the agent runtime "
                                        f"writes ({count} line{'s' if count > 1 else ''}): carried, not indexed"))
        if name and not job.entry.get("displayName"):
            meta = {**(meta or {}), **_display_name(job, name, report.problems)}
        if events or meta is not None or line_no > consumed:
            group.add(_Step(job, meta, events, event_lines, line_no, file_report))
            if group.events >= BATCH_EVENTS:
                await group.send(group.take())
        if progress:
            progress(done_bytes, total_bytes)
    await group.flush()
    for agent in consumed_by_agent:
        engine._meta_changed(agent)
    report.seconds = time.monotonic() - started
    log.info("import.done", sessions=report.sessions, events=report.events, problems=len(report.problems),
             seconds=round(report.seconds, 3))
    return report


def _session_name(body: dict[str, Any], name: str | None) -> str | None:
    """The session's name once a session_info entry is read: its `name`; an empty one clears it."""
    value = body.get("name")
    if value is None:
        return name
    return value.strip() or None if isinstance(value, str) else name


def _display_name(job: ImportJob, name: str, problems: list[Problem]) -> dict[str, Any]:
    """The session_info name as the session's displayName (sessions.json gave none)."""
    meta, refused = check_meta({"displayName": name})
    for problem in refused:
        problems.append(Problem(job.path or job.session_id, None,
                                f"session_info name not used as displayName: {problem.message}"))
    return meta


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@dataclass
class _Step:
    """One write of an import: a file's events from one chunk, with its metadata if the first."""

    job: ImportJob
    meta: dict[str, Any] | None
    events: list[Event]
    event_lines: list[int]  # the line of each event, to report one the store refuses
    lines: int  # lines of the file consumed once this step is written
    report: FileReport


class _Group:
    """Import steps waiting for the writer, and the one transaction of them in flight."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.store: AgentStore[Any] | None = None
        self.items: list[_Step] = []
        self.events = 0
        self.in_flight: asyncio.Future[None] | None = None
        self.refused: set[int] = set()  # file reports whose window the store refused
        # problems the write in flight met, reported once it is awaited (not wherever the parse
        # happened to yield), as when nothing ran beside the parse
        self.problems: list[Problem] = []

    def add(self, step: _Step) -> None:
        self.items.append(step)
        self.events += len(step.events) + 1

    @property
    def writing(self) -> bool:
        return self.in_flight is not None and not self.in_flight.done()

    def take(self) -> list[_Step]:
        items, self.items, self.events = self.items, [], 0
        return items

    async def send(self, items: list[_Step]) -> None:
        """Hand `items` to the writer once the previous transaction is done; do not wait for them."""
        await self._wait()
        if self.items and items is not self.items:  # keep the order: what waits goes first
            items = self.take() + items
        assert self.store is not None  # set before the first step was added
        self.in_flight = asyncio.ensure_future(self._write(self.store, items))

    async def flush(self) -> None:
        if self.items:
            await self.send(self.take())
        await self._wait()

    async def _wait(self) -> None:
        if self.in_flight is None:
            return
        try:
            await self.in_flight
        finally:
            self.in_flight = None
            self.report.problems += self.problems
            self.problems = []

    async def _write(self, store: AgentStore[Any], steps: list[_Step]) -> None:
        results = await store.import_many([(s.job.session_key, s.meta, s.events, s.job.session_id, s.lines)
                                           for s in steps])
        for step, result in zip(steps, results, strict=False):
            if isinstance(result, Exception):
                _stop_if_unavailable(result)
                await self._salvage(store, step)
            else:
                self._count(step, result)

    def _count(self, step: _Step, result: AppendResult) -> None:
        step.report.imported += result.appended
        step.report.duplicates += result.duplicates

    async def _attempt(self, store: AgentStore[Any], step: _Step, meta: dict[str, Any] | None, events: list[Event],
                       lines: int | None) -> AppendResult | Exception:
        result: AppendResult | Exception
        (result,) = await store.import_many([(step.job.session_key, meta, events, step.job.session_id, lines)])
        _stop_if_unavailable(result)
        return result

    async def _salvage(self, store: AgentStore[Any], step: _Step) -> None:
        """Keep what of a refused step the store takes: the window, then its metadata, then its
        events in halves down to the single events refused, each reported with its line."""
        if id(step.report) in self.refused:  # an earlier chunk of this file met the same refusal
            return
        result = await self._attempt(store, step, step.meta, [], None)
        if isinstance(result, Exception) and step.meta is not None:
            refused_meta = result
            result = await self._attempt(store, step, None, [], None)
            if not isinstance(result, Exception):
                self._problem(step, None, f"session metadata not imported: {_message(refused_meta)}")
        if isinstance(result, Exception):
            self.refused.add(id(step.report))
            self._problem(step, None, f"not imported: {_message(result)}")
            return
        await self._halves(store, step, step.events, step.event_lines)
        await self._attempt(store, step, None, [], step.lines)  # the refused lines count as read

    async def _halves(self, store: AgentStore[Any], step: _Step, events: list[Event], lines: list[int]) -> None:
        if not events:
            return
        result = await self._attempt(store, step, None, events, lines[-1])
        if not isinstance(result, Exception):
            self._count(step, result)
        elif len(events) == 1:
            step.report.bad += 1
            self._problem(step, lines[0], f"not imported: {_message(result)}")
        else:
            half = len(events) // 2
            await self._halves(store, step, events[:half], lines[:half])
            await self._halves(store, step, events[half:], lines[half:])

    def _problem(self, step: _Step, line: int | None, message: str) -> None:
        self.problems.append(Problem(step.report.file, line, message))


def _stop_if_unavailable(result: object) -> None:
    """A database that cannot be written now (a full disk, a lock) refuses no line of its own: the
    import stops there, and what it did not store stays unread, for the next run to take."""
    if isinstance(result, Unavailable):
        raise result


def _message(exc: BaseException) -> str:
    return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
