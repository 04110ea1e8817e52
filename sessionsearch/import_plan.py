"""What an import reads from the gateway's legacy state dir, and what it refuses to.

A state dir is untrusted input: nothing outside the directory imported from is read (neither
through a sessionId nor through a symbolic link), nothing is written under a name that is not an
agent id, and every entry or file that cannot be used is a reported problem, never an exception.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .errors import InvalidRequest
from .keys import AGENT_ID_RE, agent_of, check_session_key
from .session_meta import KEY_FIELDS, check_meta
from .transcript.events import epoch_ms
from .values import unpaired_surrogate

INDEX_MAX_BYTES = 64 << 20  # the import_index_max_mib setting's default
# files the runtime keeps beside a window's transcript, which are not windows themselves
SIDE_FILE_RE = re.compile(r".+\.(trajectory|checkpoint\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                          r"\.jsonl", re.IGNORECASE)
ENTRY_FIELDS = ("label", "displayName", "spawnedBy", "parentSessionKey", "kind", "group", "incognito")
AGENT_ID_RULE = "agentId must be 1..64 letters, digits, '_' or '-'"


def shown(text: object) -> str:
    """`text` (a path, a message) as text that UTF-8 can encode: file names that are not UTF-8
    come back from the OS with surrogate escapes, which no JSON or terminal output could write."""
    if isinstance(text, Path):
        try:
            return os.fsencode(text).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            pass
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class Problem:
    """Something in the state dir that was not imported as it stands: where, and why."""

    file: str | Path | None  # text once made (a Path or None as given: None is "")
    line: int | None
    message: str

    def __post_init__(self) -> None:
        self.file, self.message = shown(self.file if self.file is not None else ""), shown(self.message)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message}


REPLACED = "replaced since the import checked it"


@dataclass(frozen=True)
class Source:
    """A transcript as checked when the import was planned: the read opens this very file or none."""

    path: Path  # resolved: a regular file inside the state dir
    dev: int
    ino: int


@dataclass
class ImportJob:
    """One window to import: its transcript, and the sessions.json entry naming it."""

    agent_id: str
    session_key: str
    session_id: str
    path: Path | None  # None: the entry's transcript is missing; its metadata is still imported
    entry: dict[str, Any]
    index: Path | None = None  # the sessions.json the entry is from, and its key there
    entry_key: str = ""
    source: Source | None = None  # the file at `path` as checked (read with open_checked)
    home: str = ""  # the agent whose sessions dir the entry or file is from
    window: bool = True  # False: the entry's metadata only, as a session without a window


@dataclass
class ImportPlan:
    """Everything an import will read, and what it found wrong before reading a transcript."""

    root: Path  # the resolved directory imported from; nothing outside it is read
    jobs: list[ImportJob] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    index_max_bytes: int = INDEX_MAX_BYTES


def is_agent_id(value: object) -> bool:
    # fullmatch: the pattern's `$` would also accept a trailing newline
    return isinstance(value, str) and AGENT_ID_RE.fullmatch(value) is not None


def plan_import(path: Path, agent_id: str | None = None, *, index_max_bytes: int = INDEX_MAX_BYTES) -> ImportPlan:
    """What to import from a state dir, an agent dir, a sessions dir, or one .jsonl file.

    A sessions.json over `index_max_bytes` is a problem, never read. Raises InvalidRequest for an
    `agent_id` that is not an agent id and for a path that is none of those; everything wrong
    inside the path is a reported problem instead.
    """
    plan = _plan(Path(path), agent_id, index_max_bytes)
    _settle(plan)
    return plan


def _plan(path: Path, agent_id: str | None, index_max_bytes: int) -> ImportPlan:
    if agent_id is not None and not is_agent_id(agent_id):
        raise InvalidRequest(AGENT_ID_RULE, field="agentId")
    if not path.exists():
        raise InvalidRequest(f"{shown(path)}: no such file or directory", field="path")
    if path.is_file():
        if path.suffix != ".jsonl":
            raise InvalidRequest(f"{shown(path)}: expected a .jsonl transcript or a state directory", field="path")
        plan = ImportPlan(path.parent.resolve(), index_max_bytes=index_max_bytes)
        _agent_jobs(plan, agent_id or _agent_of_sessions_dir(path.parent), path.parent, only=path)
        return plan
    plan = ImportPlan(path.resolve(), index_max_bytes=index_max_bytes)
    if (path / "agents").is_dir():
        agent_dirs = sorted(p for p in (path / "agents").iterdir() if p.is_dir())
    elif (path / "sessions").is_dir():
        agent_dirs = [path]
    elif (path / "sessions.json").exists() or any(path.glob("*.jsonl")):
        _agent_jobs(plan, agent_id or _agent_of_sessions_dir(path), path)
        return plan
    else:
        raise InvalidRequest(f"{shown(path)}: not a state dir (no agents/), agent dir or sessions dir", field="path")
    for agent_dir in agent_dirs:
        agent = agent_dir.name
        if agent_id is not None and agent != agent_id:
            continue
        if not is_agent_id(agent):
            plan.problems.append(Problem(agent_dir, None, "not a valid agent id; skipped"))
            continue
        outside = _outside(agent_dir, plan.root)
        if outside:
            plan.problems.append(Problem(agent_dir, None, f"{outside}; skipped"))
            continue
        _agent_jobs(plan, agent, agent_dir / "sessions")
    return plan


def _agent_of_sessions_dir(sessions_dir: Path) -> str:
    agent = sessions_dir.parent.name if sessions_dir.name == "sessions" else "main"
    return agent if is_agent_id(agent) else "main"


def _outside(path: Path, root: Path) -> str | None:
    """Why `path` must not be read from an import of `root`, or None when it may."""
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        return "missing" if not path.is_symlink() else "a symbolic link to nothing"
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL, an unreadable dir
        return f"unreadable: {describe_error(exc)}"
    if real != root and not real.is_relative_to(root):
        return f"points outside {shown(root)}"
    return None


def _check_file(path: Path, root: Path) -> tuple[str | None, Source | None]:
    """Why the file at `path` cannot be read, or the file it is: a regular file inside `root`."""
    why = _outside(path, root)
    if why:
        return why, None
    try:
        real = path.resolve(strict=True)
        st = os.lstat(real)
    except (OSError, RuntimeError, ValueError) as exc:
        return f"unreadable: {describe_error(exc)}", None
    if not stat.S_ISREG(st.st_mode):  # a directory, or a FIFO whose open would wait forever
        return "not a regular file", None
    return None, Source(real, st.st_dev, st.st_ino)


def open_checked(source: Source) -> BinaryIO:
    """The transcript the plan checked, opened for reading. Its path may name something else by
    now (swapped for a symbolic link out of the state dir, a FIFO, another file): that is refused
    with OSError(REPLACED), never followed and never waited on."""
    try:
        fd = os.open(source.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise OSError(exc.errno, REPLACED) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (source.dev, source.ino):
            raise OSError(errno.ESTALE, REPLACED)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def describe_error(exc: BaseException) -> str:
    """A short reason for a failed read, without the path the problem already names."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, RuntimeError) and "loop" in str(exc):  # Path.resolve before Python 3.13
        return "a symbolic link loop"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: {exc.reason} at byte {exc.start}"
    return str(exc)


def _session_id_problem(session_id: str) -> str | None:
    """What keeps `session_id` from naming a transcript file inside its sessions dir, if anything."""
    if any(bad in session_id for bad in ("/", "\\", "\x00", "..")):
        return "may not contain '/', '\\', '..' or NUL (it must name a file in its sessions dir)"
    if unpaired_surrogate(session_id):
        return "is not UTF-8 text"
    if len(os.fsencode(session_id + ".jsonl")) > 255:
        return "is too long for a file name"
    return None


def _read_index(plan: ImportPlan, index_path: Path) -> dict[str, Any] | None:
    """sessions.json's entries; None (with a reported problem) when it cannot be used."""
    why, source = _check_file(index_path, plan.root)
    if why or source is None:
        why = why or "not a regular file"
        plan.problems.append(Problem(index_path, None, why if why.startswith("unreadable") else f"unreadable: {why}"))
        return None
    limit = plan.index_max_bytes
    try:
        with open_checked(source) as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(limit + 1) if size <= limit else b""  # read no more than the limit, grown or not
        if size > limit or len(data) > limit:
            plan.problems.append(Problem(index_path, None, _too_big(max(size, len(data)), limit)))
            return TOO_BIG
        raw = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError, MemoryError) as exc:  # UnicodeDecodeError is a ValueError
        plan.problems.append(Problem(index_path, None, f"unreadable: {describe_error(exc)}"))
        return None
    if not isinstance(raw, dict):
        plan.problems.append(Problem(index_path, None, "unreadable: must map session keys to entries"))
        return None
    return raw


TOO_BIG: dict[str, Any] = {}  # what _read_index answers for a sessions.json over the limit


def _too_big(size: int, limit: int) -> str:
    mib = limit >> 20
    return (f"not read: {size:,} bytes, over the {limit:,} bytes ({mib} MiB) an import reads of a sessions.json; "
            f"raise import_index_max_mib (SESSIONSEARCH_IMPORT_INDEX_MAX_MIB) above {-(-size // (1 << 20))} to "
            "import this agent: none of its transcripts was imported (under generated keys, their windows could "
            "not take their keys later)")


def _agent_jobs(plan: ImportPlan, agent: str, sessions_dir: Path, only: Path | None = None) -> None:
    index_path = sessions_dir / "sessions.json"
    entries: dict[str, Any] = {}
    if index_path.exists() or index_path.is_symlink():
        read = _read_index(plan, index_path)
        if read is TOO_BIG:
            return
        entries = read or {}
    elif only is None:
        plan.problems.append(Problem(index_path, None, "missing; transcripts imported under generated keys"))
    referenced: dict[str, str] = {}
    for key, entry in entries.items():
        job = _entry_job(plan, agent, sessions_dir, index_path, key, entry, referenced, only)
        if job is not None:
            plan.jobs.append(job)
    try:
        files = [only] if only is not None else sorted(sessions_dir.glob("*.jsonl"))
    except OSError as exc:
        plan.problems.append(Problem(sessions_dir, None, f"unreadable: {describe_error(exc)}"))
        files = []
    for file in files:
        session_id = file.name.removesuffix(".jsonl")
        if session_id in referenced:
            continue
        if SIDE_FILE_RE.fullmatch(file.name):
            plan.notes.append(Problem(file, None, "not a session window (a file the agent runtime keeps beside "
                                                  "a transcript); skipped"))
            continue
        why = _session_id_problem(session_id)
        why, source = (f"file name {why}", None) if why else _check_file(file, plan.root)
        if why:
            plan.problems.append(Problem(file, None, f"{why}; skipped"))
            continue
        plan.jobs.append(ImportJob(agent, generated_key(agent, session_id), session_id, file, {}, source=source,
                                   home=agent))


def _entry_job(plan: ImportPlan, agent: str, sessions_dir: Path, index_path: Path, key: str, entry: object,
               referenced: dict[str, str], only: Path | None) -> ImportJob | None:
    """The import of one sessions.json entry, or None: with the reason reported, or silently when
    the import is of `only`, another file."""
    def skip(why: str) -> ImportJob | None:
        plan.problems.append(Problem(index_path, None, f"entry {key!r}{why}; skipped"))
        return None

    if not isinstance(entry, dict):
        return skip(" is not an object")
    session_id = entry.get("sessionId")
    if session_id is None:
        return skip(" has no sessionId")
    if not isinstance(session_id, str) or not session_id:
        return skip(": sessionId must be a non-empty string")
    why = _session_id_problem(session_id)
    if why:
        return skip(f": sessionId {session_id!r} {why}")
    full_key = key if key.startswith("agent:") else f"agent:{agent}:{key}"
    try:
        owner = agent_of(check_session_key(full_key))
    except InvalidRequest as exc:
        return skip(f": {exc.message}")
    if session_id in referenced:
        first = referenced[session_id]
        return _shared_window(plan, agent, index_path, key, full_key, owner, first, entry, only)
    referenced[session_id] = key
    if only is not None and only.name != f"{session_id}.jsonl":
        return None
    if owner != agent:
        # history and sessionKey-scoped search look a key up under the agent it names
        plan.notes.append(Problem(index_path, None,
                                  f"entry {key!r} names agent {owner}; stored under that agent"))
    file = sessions_dir / f"{session_id}.jsonl"
    transcript: Path | None = file
    why, source = _check_file(file, plan.root)
    if why == "missing":
        plan.problems.append(Problem(file, None, f"missing transcript of {full_key}"))
        transcript = None
    elif why:
        plan.problems.append(Problem(file, None, f"{why}; transcript of {full_key} skipped"))
        transcript = None
    return ImportJob(owner, full_key, session_id, transcript, entry, index_path, key, source, home=agent)


def generated_key(agent: str, session_id: str) -> str:
    """The key of a transcript no sessions.json entry names."""
    return f"agent:{agent}:imported:{session_id}"


def _shared_window(plan: ImportPlan, agent: str, index_path: Path, key: str, full_key: str, owner: str,
                   first: str, entry: dict[str, Any], only: Path | None) -> ImportJob | None:
    """A second entry naming a sessionId an earlier one took: a window belongs to one key. The same
    key written another way (`main` and `agent:main:main`) adds its fields to the first entry's;
    another key is imported as a session of its own, its metadata without a transcript."""
    session_id = entry["sessionId"]
    for job in plan.jobs:
        if job.index == index_path and job.entry_key == first:
            if job.session_key == full_key:
                job.entry = {**entry, **{k: v for k, v in job.entry.items() if v is not None}}
                plan.notes.append(Problem(index_path, None, f"entries {first!r} and {key!r} are one session key "
                                          f"with one sessionId; their fields imported together ({first!r}'s first)"))
                return None
            break
    if only is not None and only.name != f"{session_id}.jsonl":
        return None
    plan.problems.append(Problem(index_path, None, (
        f"entry {key!r}: sessionId {session_id!r} is already the window of {first!r}, and a window belongs to one "
        f"session key; {key!r} imported with its metadata and without a transcript. To give it its own, copy "
        f"{session_id}.jsonl to a new sessionId, set that in the entry and import again")))
    return ImportJob(owner, full_key, session_id, None, entry, index_path, key, home=agent, window=False)


def _settle(plan: ImportPlan) -> None:
    """Give each window (agent, sessionId) one job. An entry naming another agent brings a window
    into that agent from outside its own sessions dir; where that agent's own dir has the same
    sessionId, its own keeps it, and the entry from outside is imported as two things: its
    metadata as a session without a window, its transcript under a generated key of the agent
    whose dir holds it."""
    while True:
        seen: dict[tuple[str, str], ImportJob] = {}
        clash: list[tuple[ImportJob, ImportJob]] = []
        for job in plan.jobs:
            if not job.window:
                continue
            other = seen.setdefault((job.agent_id, job.session_id), job)
            if other is not job:
                clash.append((other, job))
        if not clash:
            return
        for a, b in clash:
            keep, move = (b, a) if a.home != a.agent_id and b.home == b.agent_id else (a, b)
            if not move.window:
                continue  # already moved in this pass
            _move_out(plan, move, keep)


def _move_out(plan: ImportPlan, job: ImportJob, keep: ImportJob) -> None:
    """Import `job`, which lost its window to `keep`, as its metadata alone plus its transcript
    under a generated key of the agent whose sessions dir holds it."""
    job.window = False
    where = shown(job.index) if job.index else shown(job.path)
    moved = ""
    if job.path is not None and job.home != job.agent_id:
        plan.jobs.append(ImportJob(job.home, generated_key(job.home, job.session_id), job.session_id, job.path, {},
                                   source=job.source, home=job.home))
        moved = f"; its transcript imported as {generated_key(job.home, job.session_id)}"
    elif job.path is not None:
        moved = "; its transcript not imported a second time"
    job.path = job.source = None
    plan.problems.append(Problem(where, None, (
        f"entry {job.entry_key!r}: sessionId {job.session_id!r} of agent {job.agent_id} is also the window of "
        f"{keep.session_key!r} from {shown(keep.index or keep.path)}; {job.session_key!r} imported with its "
        f"metadata and without a transcript{moved}. To keep both as one session, give one of them another "
        "sessionId (rename its transcript and its entry) and import again")))


def entry_meta(job: ImportJob, problems: list[Problem]) -> dict[str, Any]:
    """The session metadata of the job's sessions.json entry; a field that is wrong is reported and left out."""
    entry, where = job.entry, f"entry {job.entry_key!r}: "
    meta, refused = check_meta({name: entry[name] for name in ENTRY_FIELDS if entry.get(name) is not None})
    for problem in sorted(refused, key=lambda p: ENTRY_FIELDS.index(p.field or "")):
        name = problem.field or ""
        problems.append(Problem(job.index, None, f"{where}{_ignored(name, entry.get(name))}; ignored"))
    updated = entry.get("updatedAt")
    if updated is not None:
        try:
            if isinstance(updated, bool) or not isinstance(updated, (int, float)):
                raise InvalidRequest("updatedAt", field="updatedAt")
            meta["updatedAt"] = epoch_ms(updated, "updatedAt")
        except InvalidRequest:
            problems.append(Problem(job.index, None, f"{where}updatedAt must be epoch milliseconds; ignored"))
    return meta


def _ignored(name: str, value: object) -> str:
    """What an import says of a metadata field it leaves out (shorter than an upsert's error)."""
    if name == "incognito":
        return "incognito must be a boolean"
    if name == "kind":
        return f"unknown kind {value!r}"
    if name in KEY_FIELDS:
        return f"{name} is not a session key"
    return f"{name} must be a string"
