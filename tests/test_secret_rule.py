"""One rule for secrets, both directions (``hermesd.redaction.Secrets``): a secret of the daemon's
environment reaches no tool unless passed, a secret's value is redacted wherever it is stored or
shown, and a plain variable is passed and never redacted.  From outside: a real daemon, a real
child, real ``env``/``echo`` commands, the real ``hermesctl``."""

from __future__ import annotations

import json
import sqlite3

import pytest

from hermesd.contract.providers import PROVIDER_KEYS
from hermesd.redaction import Secrets
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, tool_use_block
from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

GH = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
PATTERNED = {"GH_TOKEN": GH, "NPM_TOKEN": "npm_tokenvalue0123456789", "SLACK_BOT_TOKEN": "xoxb-1234-5678-slackvalue",
             "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYsecret", "PGPASSWORD": "pg-password-value",
             "MY_SERVICE_API_KEY": "my-service-api-key-value", "GOOGLE_APPLICATION_CREDENTIALS": "/creds/sa-key.json",
             "django_secret_key": "lower-case-names-count-too"}
"""Variables secret by their names alone (no ``secrets:`` lists them)."""
LOOKALIKES = {"TOKENIZERS_PARALLELISM": "tokenizers-false", "KEYMAP": "keymap-value-us", "MAX_TOKENS_HINT": "4096-tokens",
              "SECRETARIAT": "not-secret-value"}
"""Variables whose names only look like secrets: passed and never redacted."""


@pytest.mark.parametrize("name", [*PATTERNED, *PROVIDER_KEYS, "DB_PASSWORD", "PASSWORD", "SECRET", "SECRET_KEY",
                                  "GITHUB_PRIVATE_KEY", "SSH_PASSPHRASE", "VAULT_CREDENTIAL", "X_APIKEY"])
def test_names_that_are_secret_by_pattern(name):
    assert Secrets(PROVIDER_KEYS).secret(name)
    assert Secrets().secret(name) or name in PROVIDER_KEYS


@pytest.mark.parametrize("name", [*LOOKALIKES, "PATH", "STAGE", "SSH_AUTH_SOCK", "HERMES_CHILD_TOKEN", "HERMES_SECRETS"])
def test_names_that_are_not(name):
    assert not Secrets(PROVIDER_KEYS).secret(name)


def _stored(d, job_id: str) -> dict[str, str]:
    """Everything a job left where it is stored or shown: its files, the events, the result, ``ps``, state.db."""
    folder = d.home / "jobs" / job_id
    shown = {str(p): p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()}
    shown |= {"events": d.ctl("--json", "events").stdout, "result": json.dumps(d.call("result", id=job_id, trajectory=True)),
              "ps": d.ctl("--json", "ps", "--all").stdout, "daemon log": d.log()}
    db = sqlite3.connect(d.home / "state.db")
    try:
        shown["state.db"] = "\n".join(db.iterdump())
    finally:
        db.close()
    return shown


def test_a_plain_env_value_is_passed_and_never_redacted(make_daemon):
    """``hermesctl delegate --env STAGE=production``: the command prints ``deploying to production
    now``, and the model, the trajectory, the log, the events and state.db say just that."""
    with FakeAnthropic() as api:
        api.reply_tool_use("terminal", {"command": 'echo "deploying to $STAGE now"'}).reply_text("deployed")
        d = make_daemon({"provider": "anthropic", "base_url": api.url}, env={"ANTHROPIC_API_KEY": "test-key-0123456789"})
        out = d.ctl("--json", "delegate", "deploy it", "--env", "STAGE=production", "--toolsets", "terminal")
        assert out.returncode == 0, out.stderr
        job = json.loads(out.stdout)
        assert job["status"] == "completed" and job["env"] == ["STAGE"]
        seen = json.dumps(api.requests[-1].body)
        assert "deploying to production now" in seen  # the model is given the command's output as it is
        shown = _stored(d, job["id"])
        assert "deploying to production now" in shown[str(d.home / "jobs" / job["id"] / "trajectory.json")]
        for where, text in shown.items():
            assert "REDACTED" not in text, where
        ps = d.ctl("--json", "ps", "--all").stdout
        assert '"env": ["STAGE"]' in ps and "production" not in ps  # names only, never values


def _run(d, command: str) -> dict:
    """Run ``command`` in a job's terminal (scripted model), to completion."""
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": command}}]}, {"text": "done"}]
    job = d.wait_job(d.delegate("run it", toolsets=["terminal"], script=script)["id"])
    assert job["status"] == "completed", job
    return job


def test_a_secret_of_the_daemons_environment_reaches_no_command_and_is_stored_nowhere(make_daemon):
    d = make_daemon(env={**PATTERNED, **LOOKALIKES})
    job = _run(d, "env | sort > env.txt; env; echo GH is ${GH_TOKEN:-unset}")
    seen = dict(line.split("=", 1) for line in (d.work / "env.txt").read_text().splitlines() if "=" in line)
    assert not set(PATTERNED) & set(seen)
    assert {k: seen.get(k) for k in LOOKALIKES} == LOOKALIKES  # look-alikes are plain: passed
    trajectory = (d.home / "jobs" / job["id"] / "trajectory.json").read_text()
    assert "GH is unset" in trajectory and "tokenizers-false" in trajectory  # and not redacted
    for where, text in _stored(d, job["id"]).items():
        for name, value in PATTERNED.items():
            assert value not in text, (where, name)
    for path in d.home.rglob("*"):
        if path.is_file():
            assert GH.encode() not in path.read_bytes(), path


def test_terminal_pass_env_gives_a_secret_to_the_commands_and_its_value_is_redacted(make_daemon):
    d = make_daemon(config={"terminal": {"pass_env": ["GH_TOKEN"]}}, env={"GH_TOKEN": GH, "NPM_TOKEN": PATTERNED["NPM_TOKEN"]})
    job = _run(d, 'printf %s "$GH_TOKEN" > token.txt; echo "GH is $GH_TOKEN, NPM is ${NPM_TOKEN:-unset}"')
    assert (d.work / "token.txt").read_text() == GH  # the command had it
    trajectory = (d.home / "jobs" / job["id"] / "trajectory.json").read_text()
    assert "GH is [REDACTED:GH_TOKEN], NPM is unset" in trajectory
    for where, text in _stored(d, job["id"]).items():
        assert GH not in text, where
    assert GH not in json.dumps(d.call("status"))


def test_the_rule_of_a_childs_environment():
    """What the daemon hands a child (``HERMES_SECRETS``, ``HERMES_PASS_ENV``) and the patterns, read back."""
    environ = {"GH_TOKEN": GH, "NPM_TOKEN": "npm-value-123", "DATABASE_URL": "postgres://u:p@db/x", "STAGE": "production",
               "HERMES_SECRETS": "DATABASE_URL", "HERMES_PASS_ENV": "NPM_TOKEN,STAGE", "HERMES_CHILD_TOKEN": "t" * 32}
    rule = Secrets.of_child(environ, PROVIDER_KEYS, ("HERMES_CHILD_TOKEN",))
    assert rule.hidden(environ) == {"GH_TOKEN", "DATABASE_URL", "HERMES_CHILD_TOKEN"}
    redactor = rule.redactor(environ)
    assert redactor.text(f"{GH} npm-value-123 postgres://u:p@db/x production {'t' * 32}") == (
        "[REDACTED:GH_TOKEN] [REDACTED:NPM_TOKEN] [REDACTED:DATABASE_URL] production [REDACTED:HERMES_CHILD_TOKEN]")
    assert Secrets.of_child({"HERMES_PASS_ENV": "HERMES_CHILD_TOKEN"}, (), ("HERMES_CHILD_TOKEN",)).hidden(
        {"HERMES_CHILD_TOKEN": "x"}) == {"HERMES_CHILD_TOKEN"}  # the token is never passed



DEPLOY = "deploy-key-7f3a9c0e5b1d"
"""A value given with ``--secret``; ``DEPLOY_KEY`` matches no pattern: it is secret by the job's word alone."""


def test_a_secret_given_with_the_job_reaches_its_command_and_is_redacted_everywhere(make_daemon):
    """``hermesctl delegate --secret DEPLOY_KEY=VALUE``: the command has it; the model, the
    trajectory, the log, the events, ps, the result and state.db never do (the goal quoting it
    neither), and once the job ended no file of HERMES_HOME holds it."""
    with FakeAnthropic() as api:
        api.reply_tool_use("terminal", {"command": 'printf %s "$DEPLOY_KEY" > key.txt; echo "key is $DEPLOY_KEY"'})
        api.reply_text("deployed")
        d = make_daemon({"provider": "anthropic", "base_url": api.url}, env={"ANTHROPIC_API_KEY": "test-key-0123456789"})
        out = d.ctl("--json", "delegate", f"deploy with {DEPLOY}", "--secret", f"DEPLOY_KEY={DEPLOY}",
                    "--env", "STAGE=production", "--toolsets", "terminal")
        assert out.returncode == 0, out.stderr
        job = json.loads(out.stdout)
        assert job["status"] == "completed" and job["env"] == ["DEPLOY_KEY", "STAGE"]
        assert job["goal"] == "deploy with [REDACTED:DEPLOY_KEY]"
        assert (d.work / "key.txt").read_text() == DEPLOY  # the command had it
        seen = json.dumps([r.body for r in api.requests])
        assert DEPLOY not in seen and "key is [REDACTED:DEPLOY_KEY]" in seen
        for where, text in _stored(d, job["id"]).items():
            assert DEPLOY not in text, where
        for path in d.home.rglob("*"):
            if path.is_file():
                assert DEPLOY.encode() not in path.read_bytes(), path


def test_secrets_named_alone_are_the_daemons_and_values_wait_in_a_private_file_until_the_end(make_daemon):
    """``--env NAME`` and ``--secret NAME`` pass the daemon's variable (a secret one too); a value
    given for a secret name waits in ``jobs/ID/secrets.json`` (0600) while the job lives."""
    db_url = "postgres://app:pw-9d8c7b@db.internal/app"
    d = make_daemon(env={"GH_TOKEN": GH, "DATABASE_URL": db_url})
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": (
        'printf "%s\\n" "$GH_TOKEN" "$DATABASE_URL" "$NPM_TOKEN" > seen.txt; '
        'echo "gh=$GH_TOKEN db=$DATABASE_URL npm=$NPM_TOKEN"; sleep 2')}}]}, {"text": "done"}]
    rec = d.delegate("use them", toolsets=["terminal"], script=script, secrets={"DATABASE_URL": None},
                     env={"GH_TOKEN": None, "NPM_TOKEN": "npm-given-value-1"})
    kept = d.home / "jobs" / rec["id"] / "secrets.json"
    assert json.loads(kept.read_text()) == {"NPM_TOKEN": "npm-given-value-1"} and kept.stat().st_mode & 0o777 == 0o600
    job = d.wait_job(rec["id"])
    assert job["status"] == "completed" and job["env"] == ["DATABASE_URL", "GH_TOKEN", "NPM_TOKEN"]
    assert (d.work / "seen.txt").read_text().split() == [GH, db_url, "npm-given-value-1"]
    assert not kept.exists()  # forgotten once the job ended
    trajectory = (d.home / "jobs" / rec["id"] / "trajectory.json").read_text()
    assert "gh=[REDACTED:GH_TOKEN] db=[REDACTED:DATABASE_URL] npm=[REDACTED:NPM_TOKEN]" in trajectory
    for where, text in _stored(d, rec["id"]).items():
        for value in (GH, db_url, "npm-given-value-1"):
            assert value not in text, (where, value)
    err = d.ctl("retry", rec["id"])  # its values are gone: it must be given them again
    assert err.returncode != 0 and "NPM_TOKEN" in err.stderr and "Traceback" not in err.stderr


class _TwoCommands:
    """The model: a first command (cut off by the restart), a second one, then the answer."""

    COMMANDS = ('printf "%s\\n" "first:$DEPLOY_KEY" >> key.txt; sleep 60', 'printf "%s\\n" "second:$DEPLOY_KEY" >> key.txt')

    def __call__(self, request):
        results = sum(1 for m in request.body["messages"] if isinstance(m["content"], list)
                      for b in m["content"] if b.get("type") == "tool_result")
        if results < len(self.COMMANDS):
            return Message([tool_use_block("terminal", {"command": self.COMMANDS[results]})], stop_reason="tool_use")
        return Message([text_block("finished")])


@pytest.mark.slow
def test_a_name_alone_hermesd_does_not_have_is_refused_before_anything_starts(make_daemon):
    d = make_daemon()
    for flag in ("--env", "--secret"):
        out = d.ctl("delegate", "--background", flag, "T2_NEVER_SET_VAR", "g")
        assert out.returncode == 2 and "Traceback" not in out.stderr, out
        assert "T2_NEVER_SET_VAR is not set in hermesd's environment" in out.stderr, out.stderr
    assert d.call("ps", all=True)["jobs"] == []


def test_a_job_resumed_after_kill_9_has_its_secret_again(make_daemon):
    """The values wait in ``jobs/ID/secrets.json`` for every child of the job: the one resumed
    after the daemon's ``kill -9`` has the secret too; the file goes once the job ended."""
    with FakeAnthropic() as api:
        api.default = _TwoCommands()
        d = make_daemon({"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal"]},
                        {"ANTHROPIC_API_KEY": "test-key-0123456789"})
        job = d.delegate("deploy", background=True, secrets={"DEPLOY_KEY": DEPLOY})["id"]
        key = d.work / "key.txt"
        wait_for(lambda: key.exists() and key.read_text(), 60, 0.05, "the first command")
        d.kill9()
        d.start()
        final = d.wait_job(job, timeout=120)
        assert final["status"] == "completed" and final["resumes"] == 1, final
        assert key.read_text().split() == [f"first:{DEPLOY}", f"second:{DEPLOY}"]
        assert not (d.home / "jobs" / job / "secrets.json").exists()
        for path in d.home.rglob("*"):
            if path.is_file():
                assert DEPLOY.encode() not in path.read_bytes(), path


def test_no_digest_of_a_secret_value_is_stored_with_an_idempotency_key():
    from hermesd.idempotency import digest

    def of(deploy: str, gh: str, stage: str) -> str:
        return digest({"goal": "g", "secrets": {"DEPLOY_KEY": deploy}, "env": {"GH_TOKEN": gh, "STAGE": stage}})

    assert of(DEPLOY, GH, "production") == of("another-value-1", "ghp_another", "production")
    assert of(DEPLOY, GH, "production") != of(DEPLOY, GH, "staging")  # a plain value is the request's
