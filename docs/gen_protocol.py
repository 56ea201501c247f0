"""Generate ``docs/protocol.md`` from the code: ``hermesd/protocol.py`` and the op handlers' docstrings.

Usage: ``python docs/gen_protocol.py`` (rewrite the file) or ``--check``
(exit 1 when the committed file differs).  The test suite runs the check, so
whoever adds or changes an op, an error code or an event type regenerates the
reference in the same commit.  The handlers' docstrings are the reference:
write them for the reader of this file.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from batch import line  # noqa: E402
from hermesd import protocol  # noqa: E402
from hermesd.contract import wire  # noqa: E402
from hermesd.router import ENVELOPE_OP  # noqa: E402
from hermesd.plugin import Plugins  # noqa: E402
from hermesd.server import PLUGINS, ROUTER  # noqa: E402

HANDLERS, CHILD_HANDLERS, WORK_OPS = ROUTER.ops, ROUTER.child_ops, ROUTER.work_ops

OUTPUT = ROOT / "docs" / "protocol.md"
EVENT_SOURCES = ("hermesd", "batch")
EVENT_CALL = re.compile(r"(?:events|self)\.(?:emit|record)\(\s*\"([^\"]+)\"")

CLIENT_CODES = {
    "daemon_not_running": "No daemon answers on the control socket (no socket, not yours, or it stopped "
    "before answering).",
    "not_hermesd": "What answers on the control socket is not hermesd: it closed the connection or sent what "
    "is not ZMTP 3 (said within a second, naming the socket).",
    "timeout": "The daemon did not answer in time, or `wait --timeout` ran out.",
    "job_failed": "The job ended in a state other than `completed` (`wait`, foreground `delegate`).",
    "prompts_failed": "A batch run ended with prompts that failed (`hermes-batch`): how many and the commonest "
    "errors are printed; `--resume` runs them again.",
    "budget_exceeded": "A batch run stopped because a budget of it was spent (`hermes-batch`): the budget, what "
    "was spent and the limit are printed; `--resume` with a raised limit runs the rest.",
}
"""Exit-code conditions ``hermesctl`` detects itself; the daemon never sends them."""

EVENT_MEANINGS = Plugins(PLUGINS).event_meanings()
"""What each event type means: the core's (``hermesd.events.CORE_EVENTS``) and each plugin's (``events``)."""


def md(text: str) -> str:
    """reST-flavoured docstring text → Markdown (inline literals and cross-references)."""
    text = re.sub(r":(?:data|class|func|meth|attr|mod):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text, flags=re.S)


def doc(obj) -> str:
    """The cleaned docstring of ``obj`` in Markdown ("(undocumented)" when it has none)."""
    return md(inspect.getdoc(obj) or "(undocumented)")


def attribute_docs(module) -> dict[str, str]:
    """Docstrings written under module-level assignments (``NAME = …`` then a string), by name."""
    body = ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body
    docs = {}
    for node, after in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            for target in targets:
                if isinstance(target, ast.Name):
                    docs[target.id] = md(inspect.cleandoc(after.value.value))
    return docs


def ops_section(handlers: dict, heading: str) -> list[str]:
    """One ``###`` per handler module (its docstring), one ``####`` per op (its docstring)."""
    out: list[str] = []
    by_module: dict[str, list[str]] = {}
    for name, fn in handlers.items():
        by_module.setdefault(fn.__module__, []).append(name)
    for module_name in sorted(by_module):
        module = sys.modules[module_name]
        out += [f"### {heading} `{module_name.replace('.', '/')}.py`", "", doc(module), ""]
        for name in sorted(by_module[module_name]):
            out += [f"#### `{name}`", "", doc(handlers[name]), ""]
            if name in WORK_OPS:
                out += ["Refused with `shutting_down` while the daemon stops.", ""]
    return out


def wire_section(cls, title: str) -> list[str]:
    """A ``###`` for a wire dataclass (:mod:`hermesd.contract.wire`, a kind's part of the spec): its
    docstring, then one row per field (type, default, and the meaning written beside it, when there is one)."""
    out = [f"### {title}: `{cls.__module__}.{cls.__name__}`", "", doc(cls), "",
           "| field | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kind = str(f.type).replace("|", "\\|")
        out.append(f"| `{f.name}` | `{kind}` | `{default!r}` | {md(f.metadata.get('doc', ''))} |")
    return [*out, ""]


def event_types() -> dict[str, list[str]]:
    """Event type → the source files that emit it (found by reading the daemon-side code)."""
    found: dict[str, set[str]] = {}
    for top in EVENT_SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for etype in EVENT_CALL.findall(path.read_text(encoding="utf-8")):
                found.setdefault(etype, set()).add(str(path.relative_to(ROOT)))
    return {k: sorted(v) for k, v in sorted(found.items())}


def render() -> str:
    """The whole of ``docs/protocol.md``."""
    missing = set(protocol.EXIT_CODES) - set(protocol.ERROR_CODES) - set(CLIENT_CODES)
    if missing:
        raise SystemExit(f"gen_protocol: describe the client exit code(s) {sorted(missing)} in CLIENT_CODES")
    out = ["<!-- Generated by docs/gen_protocol.py from hermesd/protocol.py and the op handlers' docstrings.",
           "     Do not edit by hand: change the code, then run `python docs/gen_protocol.py`. -->", "",
           "# hermesd control protocol", "",
           f"Protocol version **{protocol.PROTOCOL_VERSION}**. Largest frame: "
           f"**{protocol.MAX_MESSAGE_BYTES} bytes** ({protocol.MAX_MESSAGE_BYTES // (1 << 20)} MiB): a larger request "
           f"gets `too_large`, up to {protocol.MAX_FRAME_READ // (1 << 20)} MiB; past that ZeroMQ drops the "
           "connection without a reply. List replies (`ps`, `events_since`) are cut to fit and say `more`.", "",
           "Sockets (ZeroMQ `ipc://` in the runtime directory: `$HERMES_RUNTIME_DIR`, else "
           "`$XDG_RUNTIME_DIR/hermes`, else `$HERMES_HOME/run`; the directory 0700, the sockets 0600):", "",
           "| socket | type | for |", "|---|---|---|",
           "| `hermesd.sock` | ROUTER | client requests (clients use DEALER) |",
           "| `events.sock` | PUB | events, topic `" + protocol.EVENT_TOPIC.decode() + "` |",
           "| `children.sock` | ROUTER | child processes (`child.*` ops) |", "",
           "## Envelope", "", doc(protocol), "",
           "## Error codes and `hermesctl` exit statuses", "",
           "The set is closed. A reply with `ok: false` carries `error: {code, message, details}`; "
           "`hermesctl` exits with the status in the second column (0 on success, 2 also for usage errors).", "",
           "| code | exit | meaning |", "|---|---|---|"]
    out += [f"| `{code}` | {protocol.EXIT_CODES[code]} | {text} |" for code, text in protocol.ERROR_CODES.items()]
    out += ["", "Conditions `hermesctl` detects itself (never sent by the daemon):", "",
            "| code | exit | meaning |", "|---|---|---|"]
    out += [f"| `{code}` | {protocol.EXIT_CODES[code]} | {text} |" for code, text in CLIENT_CODES.items()]
    out += ["", "## Client ops (`hermesd.sock`)", "",
            "Arguments are the request's `args` map; unknown ops get `unknown_op`, arguments of the wrong "
            "type `bad_request` naming the field.", ""]
    out += ops_section(HANDLERS, "Family")
    try:
        from hermesd.delegation.tasks import task_fields
    except ImportError:
        task_fields = None
    if task_fields is not None:
        out += ["### Task arguments", "", "Used by `delegate`, `spawn_parallel` (each task) and `child.delegate`.",
                "", doc(task_fields), ""]
    out += ["## Child ops (`children.sock`)", "", attribute_docs(protocol).get("CHILD_OPS", ""), "",
            "Every child op carries `job` and `token`; a wrong token is refused.", ""]
    out += ops_section(CHILD_HANDLERS, "Handlers in")
    out += wire_section(wire.JobSpec, "Job spec")
    parts: dict[type, list[str]] = {}
    for kind in Plugins(PLUGINS).kinds.values():
        if kind.spec is not None:
            parts.setdefault(kind.spec, []).append(kind.name)
    for cls, names in parts.items():
        out += wire_section(cls, "Part of the job spec of " + ", ".join(f"`{n}`" for n in names))
    out += wire_section(wire.JobResult, "Job result")
    pending = [name for name in protocol.CHILD_OPS if name not in CHILD_HANDLERS and name != ENVELOPE_OP]
    if pending:
        out += ["Declared in `CHILD_OPS` but not handled yet (the daemon answers `unknown_op`): "
                + ", ".join(f"`{name}`" for name in pending) + ".", ""]
    out += ["## Events (`events.sock`)", "",
            "Each event: `v`, `seq` (strictly increasing, never reused), `type`, `time` (ISO 8601 UTC), `job`, "
            "`session`, `data`. Persisted before it is published; `events_since` returns the backlog. "
            "Clients show types they do not know generically.", "",
            "| type | meaning | emitted in |", "|---|---|---|"]
    for etype, files in event_types().items():
        meaning = EVENT_MEANINGS.get(etype, "(not described yet)")
        out.append(f"| `{etype}` | {meaning} | {', '.join(f'`{f}`' for f in files)} |")
    out += ["", "## Batch output: the trajectory line", "", md(inspect.cleandoc(TRAJECTORY_LINE)), "",
            "| key | type | meaning |", "|---|---|---|"]
    out += [f"| `{key}` | {kind} | {md(meaning)} |" for key, kind, meaning in line.reference()]
    return "\n".join(out).rstrip() + "\n"


TRAJECTORY_LINE = """
    One line of `batch_N.jsonl` and of `trajectories.jsonl` (JSON Lines), what `hermes-batch`
    writes per finished prompt; generated from its declaration, `batch.line.LINE`, from which
    the writer and the run folder's dataset card (`README.md`, the features `datasets` loads it
    with) are derived too. Types are the dataset card's: `json` keys are stored as JSON text in
    Arrow and read back as objects.
"""


def main(argv: list[str]) -> int:
    """Write ``docs/protocol.md``, or with ``--check`` report whether it is current (exit 1 if not)."""
    text = render()
    if "--check" in argv:
        if OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text:
            return 0
        print("docs/protocol.md is out of date: run `python docs/gen_protocol.py` and commit it", file=sys.stderr)
        return 1
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
