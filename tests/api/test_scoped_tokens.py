"""Scoped tokens: parsed from the config with errors naming the entry, identified by hash, bound to their requester."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from sessionsearch import Forbidden, InvalidRequest, Settings
from sessionsearch.auth import OPERATOR, Caller, Credentials, bind_requester, parse_scoped_tokens, sha256_hex
from sessionsearch.identity import Requester

MAIN = "agent:main:main"


def entry(token: str = "t0k3n", requester: str = MAIN, **extra) -> dict:
    return {"token_sha256": sha256_hex(token), "requester": requester, **extra}


def test_a_scoped_token_is_known_by_its_hash_and_names_its_requester():
    creds = Credentials("operator-token", parse_scoped_tokens([entry(), entry("other", "agent:ops:x", sandboxed=True)],
                                                              "c.toml"))
    assert creds.identify("Bearer operator-token") == OPERATOR
    assert creds.identify("Bearer t0k3n") == Caller(Requester(MAIN, False))
    assert creds.identify("bearer other") == Caller(Requester("agent:ops:x", True))
    assert creds.identify("Bearer wrong") is None and creds.identify(None) is None
    assert creds.identify(f"Bearer {sha256_hex('t0k3n')}") is None  # the stored hash is no token


def test_without_any_token_configured_every_caller_is_the_operator():
    assert Credentials(None).identify(None) == OPERATOR and not Credentials(None).required
    assert Credentials(None, parse_scoped_tokens([entry()], "c.toml")).required


@pytest.mark.parametrize("entries, message", [
    ([entry(), {"token_sha256": "abc", "requester": MAIN}],
     "c.toml: auth.tokens[1] (requester 'agent:main:main'): token_sha256 must be the token's sha256 as 64 hex digits"),
    ([entry(requester="agent:bad id:x")], "c.toml: auth.tokens[0] (requester 'agent:bad id:x'): requester must be"),
    ([{"token_sha256": sha256_hex("x")}], "c.toml: auth.tokens[0]: requester must be a non-empty string"),
    ([entry(sandboxed="yes")], "auth.tokens[0] (requester 'agent:main:main'): sandboxed must be true or false"),
    ([entry(scope="all")], "auth.tokens[0] (requester 'agent:main:main') has unknown key 'scope'"),
    ([entry(), entry()], "auth.tokens[1] (requester 'agent:main:main') has the same token_sha256 as auth.tokens[0]"),
    (["x"], "c.toml: auth.tokens[0] must be a table"),
    ({"token_sha256": "x"}, "c.toml: auth.tokens must be an array of tables"),
])
def test_an_invalid_token_entry_is_refused_naming_the_entry(entries, message):
    with pytest.raises(InvalidRequest) as err:
        parse_scoped_tokens(entries, "c.toml")
    assert message in err.value.message


def test_the_operator_token_cannot_also_be_a_scoped_token():
    with pytest.raises(InvalidRequest, match="holds the hash of SESSIONSEARCH_API_TOKEN"):
        Credentials("t0k3n", parse_scoped_tokens([entry("t0k3n")], "c.toml"))


def test_a_bound_caller_acts_as_its_requester_and_may_not_name_another():
    caller = Caller(Requester(MAIN, True))
    assert bind_requester({"query": "x"}, caller)["requester"] == {"sessionKey": MAIN, "sandboxed": True}
    assert bind_requester({"requester": {"sessionKey": MAIN}}, caller)["requester"]["sandboxed"] is True
    with pytest.raises(Forbidden, match="acts as requester 'agent:main:main' \\(sandboxed\\); the request names "
                                        "'agent:main:other'"):
        bind_requester({"requester": {"sessionKey": "agent:main:other"}}, caller)
    with pytest.raises(Forbidden):  # not sandboxed is another requester too
        bind_requester({"requester": {"sessionKey": MAIN, "sandboxed": False}}, caller)
    with pytest.raises(InvalidRequest, match="requester must be an object"):
        bind_requester({"requester": "agent:main:main"}, caller)
    assert bind_requester({"requester": {"sessionKey": "agent:main:other"}}, OPERATOR)["requester"] == {
        "sessionKey": "agent:main:other"}


def test_token_new_prints_a_token_and_the_entry_that_grants_it(tmp_path):
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "token", "new", "--requester", 'agent:main:a"b',
                          "--sandboxed", "--json"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    made = json.loads(run.stdout)
    assert len(made["token"]) >= 40 and made["tokenSha256"] == sha256_hex(made["token"])
    config = tmp_path / "c.toml"
    config.write_text(made["toml"])
    assert tomllib.loads(made["toml"])["auth"]["tokens"][0]["requester"] == 'agent:main:a"b'
    settings = Settings.load(config=str(config), env={})
    assert Credentials(None, settings.auth_tokens).identify(f"Bearer {made['token']}") == Caller(
        Requester('agent:main:a"b', True))
    human = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "token", "new", "--requester", MAIN],
                           capture_output=True, text=True, timeout=60)
    assert human.returncode == 0 and "[[auth.tokens]]\ntoken_sha256 = " in human.stdout
    assert 'requester = "agent:main:main"\nsandboxed = false' in human.stdout


def test_a_server_with_an_invalid_token_entry_does_not_start_and_names_it(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'[[auth.tokens]]\ntoken_sha256 = "{sha256_hex("a")}"\nrequester = "{MAIN}"\n\n'
                      '[[auth.tokens]]\ntoken_sha256 = "not-a-hash"\nrequester = "agent:ops:main"\n')
    for command in (["serve", "--port", "1"], ["mcp"]):
        run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", *command, "--config", str(config),
                              "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        assert run.returncode == 2, (command, run.stderr)
        assert f"{config}: auth.tokens[1] (requester 'agent:ops:main'): token_sha256 must be" in run.stderr
