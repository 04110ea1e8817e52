"""The tests' Redis databases are claimed by a lock held for the process's life (tests/services.py),
so that two suites on one Redis never empty each other's database."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..services import RedisClaim, claim_redis_db

ROOT = Path(__file__).resolve().parents[2]


def test_two_claimants_on_one_redis_get_different_databases(tmp_path):
    first = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
    second = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
    try:
        assert {first.db, second.db} == {3, 4}
    finally:
        first.release()
        second.release()


def test_a_claim_is_per_redis_server(tmp_path):
    claims = [claim_redis_db("127.0.0.1", port, dbs=(3,), folder=tmp_path) for port in (1, 2)]
    try:
        assert [claim.db for claim in claims] == [3, 3]
    finally:
        for claim in claims:
            claim.release()


def test_a_released_database_is_claimed_again(tmp_path):
    first = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
    first.release()
    again = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
    try:
        assert again.db == first.db == 3
    finally:
        again.release()


def test_a_killed_holders_database_is_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from tests.services import claim_redis_db
        claim = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=__import__("pathlib").Path({str(tmp_path)!r}))
        print(claim.db, flush=True)
        sys.stdin.read()  # hold it until killed
        """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        while_held = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
        assert while_held.db != held
        holder.kill()
        holder.wait(30)
        taken_over = claim_redis_db("127.0.0.1", 1, dbs=(3, 4), folder=tmp_path)
        assert taken_over.db == held
    finally:
        holder.kill()
        holder.wait(30)
    for claim in (while_held, taken_over):
        claim.release()


def test_a_claim_fails_clearly_when_every_database_is_held(tmp_path):
    held: RedisClaim = claim_redis_db("127.0.0.1", 1, dbs=(3,), folder=tmp_path)
    try:
        with pytest.raises(RuntimeError, match=r"every test Redis database on 127\.0\.0\.1:1 \(3\) is held"):
            claim_redis_db("127.0.0.1", 1, dbs=(3,), folder=tmp_path)
    finally:
        held.release()
