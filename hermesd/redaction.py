"""Which variables are secret, and their values replaced by ``[REDACTED:NAME]``: one definition
for the daemon and its children.

A leaf (standard library only) children may import.  The rule, in both directions:

* **Secret** (:meth:`Secrets.secret`): a variable is secret when its name is a provider key
  (:data:`hermesd.contract.providers.PROVIDER_KEYS`: the callers name them), is listed under the
  config's ``secrets:``, was given to the job as a secret (``--secret NAME=VALUE``, the
  request's ``secrets``), or matches one of :data:`SECRET_PATTERNS` (whatever its case); a
  ``HERMES_*`` name is the daemon's own and never matches a pattern.
* **Kept from the tools** (:meth:`Secrets.hidden`): a secret of the child's environment (the
  daemon's, which the child inherits) is not in the environment of what its tools run, unless
  it is **passed**: named by ``terminal.pass_env`` or by the job itself (its ``env``, plain
  or ``--env NAME``, and its ``secrets``).
* **Redacted** (:meth:`Secrets.redactor`): the value of every secret is ``[REDACTED:NAME]``
  wherever it is stored or shown, passed or not.  A plain variable (``--env STAGE=production``)
  is passed and never redacted.

The child redacts what its tools return, its log and all it sends (:mod:`child.redact`); the
daemon redacts what a client submits before it is stored or published
(:meth:`hermesd.router.Router.client`), so a key pasted into a goal is in no event, row, log
or trajectory.

Values shorter than :data:`MIN_SECRET_CHARS` are not redacted: a value of a few characters
(``1``, ``yes``) would garble every output it appears in, and is no secret.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Iterable, Mapping

MIN_SECRET_CHARS = 4
"""Shortest value that is redacted (characters)."""

SECRET_PATTERNS = ("*_API_KEY", "*_APIKEY", "*_ACCESS_KEY", "*_PRIVATE_KEY", "*_SECRET_KEY",
                   "*_TOKEN", "SECRET", "SECRET_*", "*_SECRET", "*_SECRET_*",
                   "*PASSWORD*", "*PASSWD*", "*_PASSPHRASE", "*_CREDENTIAL", "*_CREDENTIALS")
"""Names that are secret whatever the config says (``fnmatch`` patterns, matched on the name in
upper case): the words of gitleaks' ``generic-api-key`` rule (its ``config/gitleaks.toml``:
``key``, ``token``, ``secret``, ``passw(or)d``, ``credential``) that name a secret, as whole words
at the end of the name (but ``SECRET`` and ``PASSWORD`` anywhere), which covers the variables Hermes
Agent keeps from its terminal (``tools/environments/local_env_policy.py``: ``GH_TOKEN``,
``SLACK_BOT_TOKEN``, ``EMAIL_PASSWORD``, ``MODAL_TOKEN_SECRET``…): ``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK`` or ``KEYMAP`` are not
secret; a secret that no pattern names (``DATABASE_URL``) goes under ``secrets:``."""

SECRETS_ENV = "HERMES_SECRETS"
"""A child's environment variable naming (comma-separated) the variables secret by name beyond the
provider keys and the patterns: the config's ``secrets:`` and the job's ``secrets``."""

PASS_ENV = "HERMES_PASS_ENV"
"""A child's environment variable naming (comma-separated) the variables its tools get even when
secret: ``terminal.pass_env`` and every variable the job was given (its ``env`` and ``secrets``)."""


JOB_VARIABLES = frozenset({"env", "secrets"})
"""The arguments of a request that give a job variables (``{NAME: value}``; ``secrets``: secret whatever the names)."""


def names_in(value: str | None) -> list[str]:
    """The comma-separated names in ``value`` (the value of :data:`SECRETS_ENV`, :data:`PASS_ENV`)."""
    return [n for n in (value or "").split(",") if n]


class Secrets:
    """The rule for one environment: ``named`` (the provider keys, ``secrets:``, the job's
    ``secrets``) are secret, and so is every name matching :data:`SECRET_PATTERNS`; ``passed``
    (``terminal.pass_env``, the job's own variables) reach the tools all the same;
    ``always`` are secret and never passed (the child's token for ``children.sock``)."""

    def __init__(self, named: Iterable[str] = (), passed: Iterable[str] = (), always: Iterable[str] = ()):
        self.always = frozenset(always)
        self.named = frozenset(named) | self.always
        self.passed = frozenset(passed) - self.always

    @classmethod
    def of_child(cls, environ: Mapping[str, str], provider_keys: Iterable[str], always: Iterable[str] = ()) -> "Secrets":
        """The rule a child reads from its environment: ``provider_keys``, the names in
        :data:`SECRETS_ENV` and ``always`` secret, those in :data:`PASS_ENV` passed."""
        return cls((*provider_keys, *names_in(environ.get(SECRETS_ENV))), names_in(environ.get(PASS_ENV)), always)

    def secret(self, name: str) -> bool:
        """Whether variable ``name`` is secret (named, or matching a pattern and not ``HERMES_*``)."""
        if name in self.named:
            return True
        upper = name.upper()
        return not upper.startswith("HERMES_") and any(fnmatchcase(upper, p) for p in SECRET_PATTERNS)

    def hidden(self, environ: Mapping[str, str]) -> set[str]:
        """The variables of ``environ`` kept from the tools: the secret ones not passed."""
        return {n for n in environ if n not in self.passed and self.secret(n)}

    def tool_environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """``environ`` without :meth:`hidden`: what a tool's process gets."""
        hidden = self.hidden(environ)
        return {k: v for k, v in environ.items() if k not in hidden}

    def given(self, args: Any) -> dict[str, str]:
        """The secret values a request's arguments give a job, ``{NAME: value}``: those of its
        ``secrets``, and those of its ``env`` whose names are secret (at any depth: a
        ``spawn_parallel`` task's too)."""
        found: dict[str, str] = {}
        if isinstance(args, dict):
            for key, value in args.items():
                if key in JOB_VARIABLES and isinstance(value, dict):
                    found |= {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)
                              and (key == "secrets" or self.secret(k))}
                elif isinstance(value, (dict, list)):
                    found |= self.given(value)
        elif isinstance(args, list):
            for value in args:
                found |= self.given(value)
        return found

    def redactor(self, environ: Mapping[str, str]) -> "Redactor":
        """The redactor of the values in ``environ`` of its secret variables."""
        return Redactor({n: v for n, v in environ.items() if self.secret(n)})


class Redactor:
    """Replaces known secret values by ``[REDACTED:NAME]``.

    ``secrets``: ``{NAME: value}``; values under :data:`MIN_SECRET_CHARS` are
    ignored; the longest value is replaced first (a value that contains another
    is replaced whole).
    """

    def __init__(self, secrets: Mapping[str, str]):
        self.secrets = dict(secrets)
        kept = {value: name for name, value in secrets.items() if value and len(value) >= MIN_SECRET_CHARS}
        self.pairs = sorted(((v, f"[REDACTED:{n}]") for v, n in kept.items()), key=lambda p: -len(p[0]))

    def adding(self, secrets: Mapping[str, str]) -> "Redactor":
        """A redactor of these secrets and ``secrets`` (``{NAME: value}``) too."""
        return Redactor({**self.secrets, **secrets})

    def text(self, text: str) -> str:
        """``text`` with every known secret value replaced."""
        for value, mark in self.pairs:
            if value in text:
                text = text.replace(value, mark)
        return text

    def data(self, value: Any, keep: frozenset[str] = frozenset()) -> Any:
        """``value`` (strings, lists, tuples, dicts, scalars: a message's arguments) with every
        string redacted (dict keys too), but the value of a dict key in ``keep`` at any depth (a
        job's ``env``: values its tools are given); the same object when there is nothing to redact."""
        if not self.pairs:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): v if k in keep else self.data(v, keep) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(v, keep) for v in value)
        return value
