"""Import of the gateway's legacy state dir: sessions.json plus one JSONL transcript per window.

Rows are bulk-written without indexing, so every imported window is marked for reconciliation.
Bad lines are reported with file and line number and skipped; everything valid is kept. Each
window records how many lines of its file were consumed, so a second run adds nothing and a file
that grew since adds only its tail.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import structlog

from .errors import InvalidRequest
from .indexer.events import parse_event
from .keys import AGENT_ID_RE, check_session_key

log = structlog.get_logger("sessionsearch.import")

BATCH_EVENTS = 5000
ENTRY_FIELDS = ("label", "displayName", "spawnedBy", "parentSessionKey", "kind", "group", "incognito")


@dataclass
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass
class FileReport:
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
    files: list[FileReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
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
            "problems": [{"file": p.file, "line": p.line, "message": p.message} for p in self.problems],
        }


@dataclass
class _Job:
    agent_id: str
    session_key: str
    session_id: str
    path: Path
    entry: dict[str, Any]


def plan_import(path: Path, agent_id: str | None = None) -> tuple[list[_Job], list[Problem]]:
    """What to import from a state dir, an agent dir, a sessions dir, or one .jsonl file."""
    path = Path(path)
    problems: list[Problem] = []
    if not path.exists():
        raise InvalidRequest(f"{path}: no such file or directory", field="path")
    if path.is_file():
        if path.suffix != ".jsonl":
            raise InvalidRequest(f"{path}: expected a .jsonl transcript or a state directory", field="path")
        sessions_dir = path.parent
        agent = agent_id or _agent_of_sessions_dir(sessions_dir)
        jobs, problems = _agent_jobs(agent, sessions_dir, only=path)
        return jobs, problems
    if (path / "agents").is_dir():
        agent_dirs = sorted(p for p in (path / "agents").iterdir() if p.is_dir())
    elif (path / "sessions").is_dir():
        agent_dirs = [path]
    elif (path / "sessions.json").exists() or any(path.glob("*.jsonl")):
        return _agent_jobs(agent_id or _agent_of_sessions_dir(path), path)
    else:
        raise InvalidRequest(f"{path}: not a state dir (no agents/), agent dir or sessions dir", field="path")
    jobs: list[_Job] = []
    for agent_dir in agent_dirs:
        agent = agent_dir.name
        if agent_id is not None and agent != agent_id:
            continue
        if not AGENT_ID_RE.match(agent):
            problems.append(Problem(str(agent_dir), None, "not a valid agent id; skipped"))
            continue
        more_jobs, more_problems = _agent_jobs(agent, agent_dir / "sessions")
        jobs += more_jobs
        problems += more_problems
    return jobs, problems


def _agent_of_sessions_dir(sessions_dir: Path) -> str:
    agent = sessions_dir.parent.name if sessions_dir.name == "sessions" else "main"
    return agent if AGENT_ID_RE.match(agent) else "main"


def _agent_jobs(agent: str, sessions_dir: Path, only: Path | None = None) -> tuple[list[_Job], list[Problem]]:
    problems: list[Problem] = []
    index_path = sessions_dir / "sessions.json"
    entries: dict[str, Any] = {}
    if index_path.exists():
        try:
            raw = json.loads(index_path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("must map session keys to entries")
            entries = raw
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(Problem(str(index_path), None, f"unreadable: {exc}"))
    elif only is None:
        problems.append(Problem(str(index_path), None, "missing; transcripts imported under generated keys"))
    jobs: list[_Job] = []
    referenced: set[str] = set()
    for key, entry in entries.items():
        where = f"{index_path}: {key!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("sessionId"), str) or not entry["sessionId"]:
            problems.append(Problem(str(index_path), None, f"entry {key!r} has no sessionId; skipped"))
            continue
        full_key = key if key.startswith("agent:") else f"agent:{agent}:{key}"
        try:
            check_session_key(full_key)
        except InvalidRequest as exc:
            problems.append(Problem(where, None, exc.message))
            continue
        session_id = entry["sessionId"]
        referenced.add(session_id)
        transcript = sessions_dir / f"{session_id}.jsonl"
        if only is not None and transcript.resolve() != only.resolve():
            continue
        if not transcript.exists():
            problems.append(Problem(str(transcript), None, f"missing transcript of {full_key}"))
            transcript = None  # type: ignore[assignment]
        jobs.append(_Job(agent, full_key, session_id, transcript, entry))  # type: ignore[arg-type]
    files = [only] if only is not None else sorted(sessions_dir.glob("*.jsonl"))
    for file in files:
        if file.stem not in referenced:
            jobs.append(_Job(agent, f"agent:{agent}:imported:{file.stem}", file.stem, file, {}))
    return jobs, problems


def _meta(entry: dict[str, Any], where: str, problems: list[Problem]) -> dict[str, Any]:
    meta = {}
    for name in ENTRY_FIELDS:
        value = entry.get(name)
        if value is None:
            continue
        if name == "incognito" and not isinstance(value, bool):
            problems.append(Problem(where, None, "incognito must be a boolean; ignored"))
            continue
        if name == "kind" and (not isinstance(value, str) or value not in ("direct", "group", "subagent", "cron", "system")):
            problems.append(Problem(where, None, f"unknown kind {value!r}; ignored"))
            continue
        if name in ("spawnedBy", "parentSessionKey"):
            try:
                check_session_key(value, field=name)
            except InvalidRequest:
                problems.append(Problem(where, None, f"{name} is not a session key; ignored"))
                continue
        meta[name] = value
    updated = entry.get("updatedAt")
    if isinstance(updated, (int, float)) and not isinstance(updated, bool):
        meta["updatedAt"] = int(updated)
    return meta


async def run_import(engine, path: Path, *, agent_id: str | None = None,
                     progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import `path` into `engine`; returns what was imported and every problem met.

    A file's rows go to the writer in chunks while the next chunk is parsed; the last chunk of
    each file waits in a group with other files' until the group is worth a transaction.
    """
    started = time.monotonic()
    jobs, problems = plan_import(Path(path), agent_id)
    report = ImportReport(problems=problems)
    total_bytes = sum(j.path.stat().st_size for j in jobs if j.path is not None) or 1
    done_bytes = 0
    consumed_by_agent: dict[str, dict[str, int]] = {}
    group = _Group(report)
    for job in jobs:
        store = await engine.store(job.agent_id, create=True)
        if group.store is not store:
            await group.flush()
            group.store = store
        if job.agent_id not in consumed_by_agent:
            consumed_by_agent[job.agent_id] = await store.all_source_lines()
        meta: dict | None = _meta(job.entry, str(job.path or job.session_key), report.problems)
        report.sessions += 1
        if job.path is None:
            await store.upsert_session(job.session_key, {**meta, "sessionId": job.session_id})
            continue
        file_report = FileReport(str(job.path), job.session_key, job.session_id)
        report.files.append(file_report)
        consumed = consumed_by_agent[job.agent_id].get(job.session_id, 0)
        batch: list = []
        now_ms = int(time.time() * 1000)
        line_no = 0
        with job.path.open("rb") as fh:
            for line_no, raw in enumerate(fh, 1):
                done_bytes += len(raw)
                if line_no <= consumed:
                    file_report.skipped_lines += 1
                    continue
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8").strip()
                    event = parse_event(json.loads(text), "event", now_ms=now_ms, source=text)
                except (ValueError, UnicodeDecodeError) as exc:
                    file_report.bad += 1
                    report.problems.append(Problem(str(job.path), line_no, f"not JSON: {exc}"))
                    continue
                except InvalidRequest as exc:
                    file_report.bad += 1
                    report.problems.append(Problem(str(job.path), line_no, exc.message.removeprefix("event")
                                                   .lstrip(".: ") or exc.message))
                    continue
                batch.append(event)
                if len(batch) >= BATCH_EVENTS:
                    await group.send([(job, meta, batch, line_no, file_report)])  # a chunk of a big file
                    meta, batch = None, []
                    if progress:
                        progress(done_bytes, total_bytes)
        file_report.lines = line_no
        if batch or meta is not None or line_no > consumed:
            group.add((job, meta, batch, line_no, file_report))
            if group.events >= BATCH_EVENTS:
                await group.send(group.take())
        if progress:
            progress(done_bytes, total_bytes)
    await group.flush()
    engine._meta_changed()
    report.seconds = time.monotonic() - started
    log.info("import.done", sessions=report.sessions, events=report.events, problems=len(report.problems),
             seconds=round(report.seconds, 3))
    return report


class _Group:
    """Import steps waiting for the writer, and the one transaction of them in flight."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.store = None
        self.items: list[tuple] = []
        self.events = 0
        self.in_flight: asyncio.Future | None = None

    def add(self, item: tuple) -> None:
        self.items.append(item)
        self.events += len(item[2]) + 1

    def take(self) -> list[tuple]:
        items, self.items, self.events = self.items, [], 0
        return items

    async def send(self, items: list[tuple]) -> None:
        """Hand `items` to the writer once the previous transaction is done; do not wait for them."""
        if self.in_flight is not None:
            await self.in_flight
        if self.items and items is not self.items:  # keep the order: what waits goes first
            items = self.take() + items
        self.in_flight = asyncio.ensure_future(self._write(self.store, items))

    async def flush(self) -> None:
        if self.items:
            await self.send(self.take())
        if self.in_flight is not None:
            await self.in_flight
            self.in_flight = None

    async def _write(self, store, items: list[tuple]) -> None:
        results = await store.import_many([(job.session_key, meta, batch, job.session_id, line_no)
                                           for job, meta, batch, line_no, _ in items])
        for (job, _meta, _batch, _line, file_report), result in zip(items, results):
            if isinstance(result, Exception):
                message = getattr(result, "message", None) or str(result)
                self.report.problems.append(Problem(file_report.file, None, f"not imported: {message}"))
                continue
            file_report.imported += result.appended
            file_report.duplicates += result.duplicates
