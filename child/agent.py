"""The agent loop of one child: ask the model, run the tools it calls, repeat.

One short loop whatever the provider (in the spirit of mini-swe-agent): the run
is a plain list of messages (:mod:`child.messages`); each turn is one model call
followed by the tool calls it asked for; the run ends with a final answer (a
reply that calls no tool; with an ``output_schema`` it must validate, after one
repair turn at most: :mod:`child.structured`), at ``max_turns``, at the opt-in
wall-clock timeout, on the
stop flag (SIGINT/SIGTERM), or on a provider error.  The model call runs in a
worker thread so that a stop or the timeout ends the run at once even while a
request is in flight; tools are called in this thread and watch the stop flag
themselves.  Every tool_use gets its tool_result, so the new messages are a
valid conversation to continue (sessions store them).

Liveness: every model call, streamed event, tool and tool output is activity
(:mod:`child.activity`), reported to hermesd, throttled, so that a busy child
is never taken for a stale one.  Steering: before each model call the loop
fetches the messages the agent that started it sent (``child.inbox``) and
adds them to the conversation.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

from child import approval, journal, redact
from child import messages as m
from child import structured
from child.activity import Activity
from child.container import ContainerError, opened, placed
from child.governor import PACED, BudgetExceeded, Grants, estimate_tokens
from child.providers.base import Completion, ProviderError
from child.providers.select import make_provider
from child.window import Window
from batch.spec import ItemSpec
from hermesd.contract.providers import context_window
from hermesd.contract.tokens import TOKEN_KEYS
from hermesd.contract.wire import JobResult, JobSpec
from hermesd.sessions.spec import TurnSpec
from hermesd.protocol import counted, one_line, timed_out_text

def log(text: str) -> None:
    """One line of the job's log (``hermesctl logs ID``): local time, then ``text``.

    The child's stderr is the job's log file; these lines say what the agent
    does (model calls, tool calls, the end), next to whatever its tools print.
    """
    now = time.time()
    print(f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d} {text}",
          file=sys.stderr, flush=True)


STEERABLE = ("delegation", "background")
"""The kinds a person may steer whatever their depth (``hermesd.delegation.service.STEERABLE``)."""

RETRY_DELAYS = (1.0, 4.0, 10.0)
"""Seconds to wait before each new attempt of a model call that failed with a retryable error."""

POLL_SECONDS = 0.05
"""How often the loop looks at the stop flag while a model call is in flight."""

SYSTEM_PROMPT = (
    "You are a subagent run by hermesd. You work alone on one task, in your own process, and your "
    "final answer goes back to whoever gave you the task, who may be busy with other work: make it "
    "self-contained (what you did, what you found, what is left). Use the tools when they help; "
    "when the task is done, reply with the final answer and call no tool."
)


def run(spec: JobSpec, channel: Any, stop: Any) -> JobResult:
    """Run the job ``spec`` and return its result.

    ``channel``: :class:`child.channel.Channel` for ``child.progress`` reports (or
    ``None``); ``stop``: :class:`child.__main__.StopFlag`.  The result has every
    field of :class:`hermesd.contract.wire.JobResult` but ``traceback``; ``trajectory``
    only with ``record_trajectory``.  Failures are reported in the result, not raised.
    The entry point of most kinds (``hermesd.jobs.JobKind.entry``); :func:`run_turn` and
    :func:`run_item` read their kind's part of the spec too.
    """
    return Agent(spec, channel, stop).run()


def run_turn(spec: JobSpec, channel: Any, stop: Any) -> JobResult:
    """:func:`run` for a session turn: its part (:class:`hermesd.sessions.spec.TurnSpec`) gives
    the session's earlier messages, which the run continues."""
    return Agent(spec, channel, stop, history=TurnSpec.from_wire(spec.part or {}).history).run()


def run_item(spec: JobSpec, channel: Any, stop: Any) -> JobResult:
    """:func:`run` for a batch item: its part (:class:`batch.spec.ItemSpec`: the ephemeral system
    prompt, prefill messages, working directory placeholder, invalid tool call retries, verifier)."""
    return Agent(spec, channel, stop, item=ItemSpec.from_wire(spec.part or {})).run()


class Agent:
    """One run of the loop; see :func:`run`."""

    def __init__(self, spec: JobSpec, channel: Any, stop: Any, *, history: list[dict] | None = None,
                 item: ItemSpec | None = None):
        self.spec, self.item = spec, item or ItemSpec()
        self.channel, self.stop = channel, stop
        self.history: list[dict] = list(history or [])
        self.new: list[dict] = []
        self.api_calls, self.tokens, self.trace = 0, dict.fromkeys(TOKEN_KEYS, 0), []
        self.provider: Any = None
        self.grants: Any = None
        self.window = Window(None)
        self.container: Any = None
        self.system, self.model_system, self.tools = "", "", []
        prefill = [p for p in self.item.prefill_messages or [] if isinstance(p, dict)]
        self.prefill = [m.user(str(p["content"])) if p.get("role") == "user" else m.assistant([m.text(str(p["content"]))])
                        for p in prefill if p.get("role") in ("user", "assistant")]
        self.prefill_system = "\n\n".join(str(p["content"]) for p in prefill if p.get("role") == "system")
        self.started = time.monotonic()
        self.budget = BudgetClock(self.stop, self.spec.timeout_seconds)  # paused while a person is asked
        self.activity = "starting"  # what the run is doing now (kept as it was when a stop came)
        self.turn = 0
        self.liveness = Activity(self.report_activity, float(self.spec.activity_interval_seconds))
        self.structured: Any = None
        self.journal: journal.Journal | None = None  # the job's journal (None: it keeps none)
        self.resumed: journal.Resumed | None = None  # what an earlier child of this job did
        self.steered: set[int] = set()  # ids of the steer messages in the conversation (its journal's too)
        self.unacked: list[int] = []  # of those, the ones to acknowledge at the next child.inbox
        self.mcp: Any = None  # the job's MCP servers (child.mcp.client.Servers), None without any
        self.mcp_tools: dict[str, Any] = {}  # their tools, by name

    def run(self) -> JobResult:
        """The whole run: set up, loop, and the result whatever happens."""
        self.budget.start()
        try:
            registry = importlib.import_module("child.tools.registry")
            self.tools = [t.spec() for t in registry.tools_for(list(self.spec.toolsets), self.spec.role)]
            self.prompt()
            self.begin(registry)
            self.provider = make_provider(self.spec, stop=self.stop)
            self.window = Window(self.spec.context_window or context_window(getattr(self.provider, "model", None),
                                                                             self.spec.context_windows))
            self.provider.activity = self.liveness
            self.grants = Grants(self.channel, self.provider, self.stop, self.liveness, log)
            if self.resumed is not None and hasattr(self.provider, "resume"):  # a script goes on where it was
                self.provider.resume(self.api_calls)
            box = container_of(self.spec, self.tools)
            if box is not None:  # a timeout or crash meanwhile says so (hermesd.exits)
                self.doing(0, f"starting a container of image {box['image']}")
            with opened(box, self.cwd(), self.spec.worktree) as self.container:  # removed in any case
                if self.container is not None:
                    log(f"container {self.container.id[:12]} of {self.container.image} started")
                try:
                    self.start_mcp(registry)
                    result = self.loop(registry)
                    if self.item.verifier and verifiable(result):
                        result.verifier = self.verify(registry)
                    return result
                finally:
                    if self.mcp is not None:  # before the container goes: its servers may run inside
                        self.mcp.close()
        except BudgetExceeded as exc:
            return self.finish("failed", "budget_exceeded", error=str(exc))
        except journal.Unwritable as exc:  # the step it records was not taken
            return self.finish_stopped() if exc.stopped else self.finish("failed", "journal", error=str(exc))
        except (ProviderError, ContainerError) as exc:
            return self.finish("failed", "error", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug still ends in a result with the partial output
            traceback.print_exc(file=sys.stderr)
            return self.finish("failed", "error", error=f"{exc.__class__.__name__}: {exc}")
        finally:
            self.budget.pause()

    def prompt(self) -> None:
        """The system prompt of the tools offered (:func:`system_prompt`, the MCP servers' notes),
        and what the model is sent besides, unrecorded."""
        self.system = system_prompt(self.spec, self.tools, importlib.import_module("child.tools.mcp").notes(self.mcp),
                                    placeholder=self.item.workdir_placeholder)
        unrecorded = [str(self.item.ephemeral_system_prompt or "").strip(), self.prefill_system.strip(),
                      container_note(self.spec, self.tools) if self.item.workdir_placeholder else ""]
        self.model_system = "\n\n".join([self.system, *(u for u in unrecorded if u)])

    def start_mcp(self, registry: Any) -> None:
        """Start the job's MCP servers (``spec.mcp_servers``, in its container when it has one) and
        offer their tools (:mod:`child.tools.mcp`)."""
        if not self.spec.mcp_servers:
            return
        mcp_tools = importlib.import_module("child.tools.mcp")
        self.doing(self.turn, f"starting MCP server(s) {', '.join(self.spec.mcp_servers)}")
        self.mcp = mcp_tools.open_for(self.spec.mcp_servers, cwd=self.cwd(), container=self.container, log=log,
                                      secrets=redact.add, stop=self.stop)
        self.mcp_tools = {t.name: t for t in mcp_tools.tools_of(self.mcp)}
        self.tools += [t.spec() for t in self.mcp_tools.values()]
        self.prompt()

    def loop(self, registry: Any) -> JobResult:
        """Model call → tool calls, until a final answer, a limit or the stop flag.

        With ``invalid_tool_call_retries`` = N (batch items; Hermes' rule), a reply
        calling a tool that was not offered or with arguments that are not a JSON
        object is not kept: the model is asked again (each attempt is a turn), and
        after N such replies in a row the run ends ``failed`` with exit reason
        ``invalid_tool_calls`` — what Hermes calls a *partial* sample.  Without
        it, such calls get an error result and the model may correct itself.
        """
        ctx = self.tool_context(registry)
        retries, invalid = self.item.invalid_tool_call_retries, 0
        turns, repaired = int(self.spec.max_turns), False
        ended = self.resume(registry, ctx)
        if ended is not None:
            return ended
        while self.turn < turns:
            self.turn = turn = self.turn + 1
            self.read_inbox()
            reply = self.query(turn)
            if reply is None:
                return self.finish_stopped()
            bad = self.invalid_calls(reply.content) if retries is not None else []
            if bad:
                invalid += 1
                log(f"turn {turn}: invalid tool call(s) {', '.join(bad)} ({invalid} of {retries}); not kept")
                if invalid >= int(retries):
                    return self.finish("failed", "invalid_tool_calls",
                                       error=f"{invalid} replies in a row with invalid tool calls: {', '.join(bad)}")
                continue
            invalid = 0
            self.add(m.assistant(reply.content))
            calls = m.tool_uses(self.new[-1])
            log(f"turn {turn}: model replied ({reply.usage.get('input', 0)} in / {reply.usage.get('output', 0)} out"
                " tokens): " + (f"calls {', '.join(c['name'] for c in calls)}" if calls else "final answer"))
            if calls:
                self.add(m.user(*[self.execute(registry, ctx, call, turn) for call in calls]))
                continue
            schema = self.spec.output_schema
            if schema is None:
                return self.finish("completed", "completed")
            self.structured, problem = structured.check(m.final_text(self.new[-1]), schema)
            if problem is None:
                return self.finish("completed", "completed")
            if repaired:
                return self.finish("failed", "output_schema", error=f"the final answer does not match "
                                   f"output_schema after one repair turn: {problem}")
            log(f"turn {turn}: final answer does not match output_schema ({problem}); one repair turn")
            repaired, turns = True, max(turns, turn + 1)
            self.add(m.user(structured.repair_prompt(problem, schema)))
        return self.finish("failed", "max_turns",
                           error=f"no final answer within max_turns={self.spec.max_turns}")

    def invalid_calls(self, content: list[dict[str, Any]]) -> list[str]:
        """Names of the calls in ``content`` to a tool not offered or with arguments that
        are not a JSON object (the latter marked ``NAME(arguments)``)."""
        offered = {t["name"] for t in self.tools}
        bad = []
        for call in m.tool_uses(m.assistant(content)):
            args = call.get("input")
            if call.get("name") not in offered:
                bad.append(str(call.get("name")))
            elif not isinstance(args, dict) or m.INVALID_JSON in args:
                bad.append(f"{call.get('name')}(arguments)")
        return bad

    def query(self, turn: int) -> Completion | None:
        """One model call, retried on retryable errors; ``None`` once the stop flag is set.

        A metered provider's call is granted first (:mod:`child.governor`): a 429, 529 or an
        overload mid-stream is reported and the call asked for again — never a failure while
        the run's deadline allows; the money running out (``quota``) is not retried."""
        delays = list(RETRY_DELAYS)
        max_tokens = int(self.spec.max_tokens)
        while not self.stop.is_set():
            messages = self.sent()
            estimate = estimate_tokens(self.model_system, messages, self.tools) if self.grants.asking else 0
            grant = self.grants.acquire(max_tokens, estimate)
            if grant is None:
                return None
            self.doing(turn, "waiting for the model's first reply" if self.api_calls == 0
                       else f"waiting for the model's reply in turn {turn}")
            try:
                reply = call_until_stopped(lambda: self.provider.complete(
                    self.model_system, messages, self.tools, max_tokens=max_tokens,
                    reasoning_effort=self.spec.reasoning_effort), self.stop, tick=self.liveness.tick)
            except ProviderError as exc:
                self.grants.done(grant, exc.kind, headers=exc.headers, retry_after=exc.retry_after)
                if exc.kind in PACED:
                    log(f"turn {turn}: model call refused ({exc}); asking the governor again")
                    continue
                if not exc.retryable or not delays:
                    raise
                delay = delays.pop(0)
                log(f"turn {turn}: model call failed ({exc}); retrying in {delay}s")
                self.stop.event.wait(delay)
                continue
            self.grants.done(grant, "ok" if reply is not None else "error",
                             headers=getattr(self.provider, "last_headers", None),
                             usage=reply.usage if reply is not None else None)
            if reply is not None:
                self.api_calls += 1
                for key in self.tokens:
                    self.tokens[key] += int(reply.usage.get(key, 0))
                self.progress(turn, None)
            return reply
        return None

    def sent(self) -> list[dict[str, Any]]:
        """The conversation as the next model call gets it: prefill, history, this run's
        messages, with older tool results shortened once it nears the context window
        (:class:`child.window.Window`; this run's messages themselves stay whole)."""
        return self.window.view(self.prefill + self.history + self.new, estimate_tokens(self.model_system, [], self.tools))

    def execute(self, registry: Any, ctx: Any, call: dict[str, Any], turn: int) -> dict[str, Any]:
        """Run one tool_use block and return its tool_result block (never raises)."""
        name, args = call["name"], call.get("input")
        if self.stop.is_set():
            return m.tool_result(call["id"], "not run: the job was stopped", is_error=True)
        self.doing(turn, f"in tool {name}" + (f" running `{one_line(args['command'], 100)}`"
                                               if isinstance(args, dict) and isinstance(args.get("command"), str)
                                               else f" {one_line(args, 100)}"))
        began = time.monotonic()
        if not isinstance(args, dict) or m.INVALID_JSON in args:
            raw = args.get(m.INVALID_JSON) if isinstance(args, dict) else args
            ok, content = False, f"the arguments of {name} are not a JSON object: {str(raw)[:300]!r}"
        else:
            if self.journal is not None:
                self.journal.started(call)
            try:
                result = registry.execute(name, args, ctx, allowed=[t["name"] for t in self.tools])
                ok, content = bool(result.ok), str(result.content)
            except Exception as exc:  # noqa: BLE001 - a tool bug is the model's error result, not a crash
                ok, content = False, f"{name} failed: {exc.__class__.__name__}: {exc}"
        self.trace.append({"name": name, "ok": ok, "bytes": len(content.encode("utf-8")),
                           "seconds": round(time.monotonic() - began, 3)})
        log(f"turn {turn}: {name} {one_line(args, 100)} -> {'ok' if ok else 'error'}, {self.trace[-1]['bytes']} "
            f"bytes: {one_line(content, 100)}")
        self.progress(turn, name)
        block = m.tool_result(call["id"], content, is_error=not ok)
        if self.journal is not None and not self.stop.is_set():  # a result cut short by a stop: run again on resume
            self.journal.result(block, self.trace[-1])
        return block

    def tool_context(self, registry: Any) -> Any:
        """The :class:`child.tools.registry.ToolContext` of this job."""
        s = self.spec
        return registry.ToolContext(cwd=self.cwd(), limits=dict(s.limits),
                                    auto_approve=bool(s.auto_approve), stop=self.stop, channel=self.channel,
                                    job=s.job, depth=int(s.depth), max_spawn_depth=int(s.max_spawn_depth),
                                    role=s.role, heartbeat=self.heartbeat, container=self.container,
                                    approval_tools=tuple(s.approval_tools or ()), budget=self.budget,
                                    extra_tools=self.mcp_tools, mcp=self.mcp)

    def verify(self, registry: Any) -> dict[str, Any]:
        """Run the item's ``verifier`` where the agent worked (:mod:`child.verify`); its
        output shows the working directory as the placeholder, as the trajectory does."""
        verify = importlib.import_module("child.verify")
        verifier = self.item.verifier or {}
        self.doing(self.turn, f"running the verifier: {one_line(verifier.get('command'), 60)}")
        outcome = verify.run(verifier, self.tool_context(registry), self.masked)
        log(f"verifier: reward {outcome['reward']}, passed {outcome['passed']}, exit status {outcome['exit_status']}"
            + (f": {outcome['error']}" if outcome["error"] else "") + f" ({outcome['seconds']:.1f}s)")
        return outcome

    @functools.cached_property
    def host_mask(self) -> Any:
        """With a ``workdir_placeholder`` (batch items): the :class:`child.hostmask.HostMask`
        of what is recorded; else None (nothing is masked)."""
        if not self.item.workdir_placeholder:
            return None
        from child.hostmask import HostMask

        return HostMask(self.cwd(), self.item.workdir_placeholder, self.spec.base_url)

    def masked(self, text: str) -> str:
        """``text`` as recorded: the host's paths and names masked (:attr:`host_mask`)."""
        return self.host_mask.text(text) if self.host_mask is not None else text

    def cwd(self) -> str:
        """The job's working directory (on the host)."""
        return self.spec.cwd or os.getcwd()

    def add(self, message: dict[str, Any]) -> None:
        """Append a message to this run's conversation (and to the journal, durable before the next step)."""
        self.new.append(message)
        if self.journal is not None:
            self.journal.message(message, self.turn, self.api_calls, dict(self.tokens))

    def begin(self, registry: Any) -> None:
        """The run's first message, or, when the job's journal holds the steps of an earlier
        child (a restart), the conversation, counters and trace it recorded (:mod:`child.journal`)."""
        self.journal = journal.open_for(self.spec, self.heartbeat, self.stop.event.wait)
        if self.journal is not None:
            self.resumed = journal.replay(self.journal.path, lambda name: bool(
                getattr(registry.get_tool(name), "repeatable", False)), lambda call: approval.waiting(self.channel, call))
        if self.resumed is None:
            self.add(m.user(first_message(self.spec)))
            return
        done = self.resumed
        self.new, self.turn, self.api_calls, self.trace = done.messages, done.turn, done.api_calls, done.trace
        self.tokens.update(done.tokens)
        self.steered = set(done.steered)
        log(f"resumed from the journal: {counted(len(done.messages), 'message')}, "
            f"{counted(done.api_calls, 'model call')} already made"
            + (f"; interrupted by the restart: {', '.join(done.interrupted)}" if done.interrupted else ""))

    def resume(self, registry: Any, ctx: Any) -> JobResult | None:
        """Resuming: the tool calls of the last model call that have no result yet run now; a
        journal that ends with the final answer ends the run with it (its result)."""
        done = self.resumed
        if done is None:
            return None
        if done.open_calls:
            self.add(m.user(*[done.results.get(c["id"]) or self.execute(registry, ctx, c, self.turn)
                              for c in done.open_calls]))
        elif self.new[-1]["role"] == "assistant":
            schema = self.spec.output_schema
            self.structured, problem = structured.check(m.final_text(self.new[-1]), schema) if schema else (None, None)
            if problem is None:
                return self.finish("completed", "completed")
            self.add(m.user(structured.repair_prompt(problem, schema)))
        return None

    def progress(self, turn: int, tool: str | None, **extra: Any) -> None:
        """Report ``child.progress`` to the daemon (no reply awaited); it is activity too.  With
        the provider and model, so the bill prices the tokens (:mod:`hermesd.billing`)."""
        self.liveness.touch()
        if self.channel is not None:
            self.channel.notify("child.progress", turn=turn, tool=tool, api_calls=self.api_calls,
                                tokens=dict(self.tokens), provider=getattr(self.provider, "name", None),
                                model=getattr(self.provider, "model", None), **extra)

    def doing(self, turn: int, activity: str) -> None:
        """Say what the run does now (``activity``), to the daemon too, with the provider
        and model: a timeout, a stale stop or a crash of the process is then reported with it."""
        self.activity = activity
        self.liveness.begin(activity)

    def report_activity(self, what: str) -> None:
        """Report ``child.progress`` with the activity ``what`` (:class:`child.activity.Activity`'s report)."""
        if self.channel is not None:  # not through progress(): a report is no activity of its own
            self.channel.notify("child.progress", turn=self.turn, tool=None, api_calls=self.api_calls,
                                tokens=dict(self.tokens), activity=what,
                                provider=getattr(self.provider, "name", None),
                                model=getattr(self.provider, "model", None))

    def heartbeat(self, what: str) -> None:
        """A running tool shows life (``ToolContext.heartbeat``, main thread): record, report throttled."""
        self.liveness.touch(what)
        self.liveness.tick()
    def read_inbox(self) -> None:
        """Add the messages sent to this run (``steer``: by the agent that started it, or by a person
        for a delegation, :data:`STEERABLE`) to the conversation: into the last user message (tool
        results) as text, so roles still alternate.  Each is journaled with its id, then
        acknowledged at the next fetch: the daemon keeps it until then, so a child that dies
        before its journal holds it does not lose it, and a message whose id the conversation
        already holds (a resumed run's journal) is only acknowledged, never added twice
        (:mod:`hermesd.delegation.inbox`).  Any other child no agent started (``depth`` 0:
        a session's turn, a batch item) has no one to steer it and does not ask (one round trip
        fewer per model call)."""
        if self.channel is None or not self.spec.job or not (self.spec.depth or self.spec.kind in STEERABLE):
            return
        try:
            answer = self.channel.call("child.inbox", timeout=10.0, **({"ack": self.unacked} if self.unacked else {}))
        except Exception as exc:  # noqa: BLE001 - no steering this step; the run goes on
            log(f"could not read messages from hermesd: {exc}")
            return
        self.unacked = []
        messages = answer.get("messages") or []
        senders, ids = list(answer.get("senders") or []), list(answer.get("ids") or [])
        for i, text in enumerate(messages):
            steer = ids[i] if i < len(ids) else None
            if steer is not None and steer in self.steered:
                self.unacked.append(steer)  # in the journal a resumed run replayed: acknowledged, not added again
                continue
            who = "a person" if i < len(senders) and senders[i] == "person" else "the agent that started you"
            log(f"message from {who.replace('you', 'this one')}: {one_line(text, 100)}")
            note = m.text(f"[Message from {who}, sent while you work]\n{text}")
            if self.new and self.new[-1]["role"] == "user":
                self.new[-1]["content"].append(note)
            else:
                self.new.append(m.user(note))
            if self.journal is not None:
                self.journal.note(note, steer)
            if steer is not None:
                self.steered.add(steer)
                self.unacked.append(steer)

    def finish_stopped(self) -> JobResult:
        """The result after the stop flag: ``timed_out`` for the timeout, else ``interrupted``."""
        if self.stop.reason == "timeout":
            limit = float(self.spec.timeout_seconds or 0)
            return self.finish("timed_out", "timeout", error=timed_out_text(limit, self.activity, self.api_calls))
        return self.finish("interrupted", "interrupted", error=f"interrupted ({self.stop.reason or 'stop'})")

    def finish(self, status: str, exit_reason: str, error: str | None = None) -> JobResult:
        """The result (see :func:`run`)."""
        log(f"finished: {status} ({exit_reason}) after {counted(self.api_calls, 'model call')}"
            + (f": {error}" if error else ""))
        replies = [m.final_text(msg) for msg in self.new if msg["role"] == "assistant"]
        summary = replies[-1] if status == "completed" else "\n\n".join(r for r in replies if r)
        if status == "completed" and self.spec.output_schema is not None:
            summary = json.dumps(self.structured, ensure_ascii=False)  # the value alone, fences dropped
        return JobResult(
            status=status, exit_reason=exit_reason, summary=summary, error=error,
            api_calls=self.api_calls, tokens=dict(self.tokens), trace=list(self.trace),
            duration_seconds=time.monotonic() - self.started,
            synthetic=bool(getattr(self.provider, "synthetic", False)),
            provider=getattr(self.provider, "name", self.spec.provider),
            model=getattr(self.provider, "model", self.spec.model),
            messages=list(self.new), trajectory=self.trajectory() if self.spec.record_trajectory else None,
            mcp=self.mcp.states() if self.mcp is not None else None)

    def trajectory(self) -> dict[str, Any]:
        """The whole conversation as training data (:mod:`child.trajectory`):
        ``conversations`` (Hermes' ShareGPT), ``messages`` and ``tools`` (the
        model-neutral view), ``has_reasoning``, ``tool_names`` (every tool the model
        called, in order, unknown names included), ``tools_offered`` and
        ``tool_stats``.  The ephemeral system prompt and the prefill messages are not in it; with
        a ``workdir_placeholder``, neither are the host's paths and names (:attr:`host_mask`)."""
        trajectory = importlib.import_module("child.trajectory")
        conversation = self.history + self.new
        recorded = {"conversations": trajectory.to_sharegpt(self.system, conversation, self.tools),
                    "messages": trajectory.to_messages(self.system, conversation),
                    "tools": trajectory.tool_schemas(self.tools),
                    "has_reasoning": bool(trajectory.has_reasoning(conversation)),
                    "tool_names": trajectory.tool_calls_in(conversation),
                    "tools_offered": [t["name"] for t in self.tools],
                    "tool_stats": trajectory.tool_stats(conversation, list(self.mcp_tools))}
        return self.host_mask.data(recorded) if self.host_mask is not None else recorded


def system_prompt(spec: JobSpec, tools: list[dict[str, Any]], notes: list[str] | None = None, *,
                  placeholder: str | None = None) -> str:
    """The spec's ``system_prompt`` (default :data:`SYSTEM_PROMPT`), the working
    directory (and the container it is mounted in: :func:`container_note`), the
    list of ``tools`` (``{"name", "description"}``) and ``notes`` (lines: MCP servers
    that are not available, :func:`child.tools.mcp.notes`).

    With a ``placeholder`` (a batch item's ``workdir_placeholder``) it stands for the directory and the
    tools are not listed (the model has them as tool definitions; the trajectory
    lists them once), so the text is the same for every run with the same tools
    (the container note then goes to the model only, with the unrecorded text).
    """
    where = placeholder or spec.cwd or os.getcwd()
    lines = [spec.system_prompt or SYSTEM_PROMPT, "", f"Working directory: {where}"]
    if placeholder:
        return "\n".join(lines + (["", *notes] if notes else []))
    note = container_note(spec, tools)
    if note:
        lines.append(note)
    if tools:
        lines += ["", "Tools you can call:"]
        lines += [f"- {t['name']}: {(t.get('description') or '').strip().partition(chr(10))[0]}" for t in tools]
    else:
        lines += ["", "You have no tools: answer from what you know."]
    return "\n".join(lines + (["", *notes] if notes else []))


def verifiable(result: JobResult) -> bool:
    """True when a run's result is a sample a verifier can judge: it ended with a final
    answer, out of turns, or after invalid tool calls (not stopped, timed out or failed)."""
    return result.status == "completed" or result.exit_reason in ("max_turns", "invalid_tool_calls")


def container_of(spec: JobSpec, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The spec's ``container`` when the job can use it (it has the ``terminal`` tool, or a stdio
    MCP server, which then runs inside), else None."""
    stdio = any(s.get("transport") == "stdio" for s in (spec.mcp_servers or {}).values())
    return spec.container if stdio or any(t["name"] == "terminal" for t in tools) else None


def container_note(spec: JobSpec, tools: list[dict[str, Any]]) -> str:
    """What the model is told of the container its commands run in (:func:`container_of`; '' without one)."""
    box = container_of(spec, tools)
    if not box:
        return ""
    _, workdir = placed(box["workdir"], spec.cwd or os.getcwd(), spec.worktree)
    return (f"Terminal commands run in a container of image {box['image']}, where the working directory is "
            f"{workdir}" + ("" if box.get("network") else " (no network)"))


def first_message(spec: JobSpec) -> str:
    """The first user message of the run: the goal, then the context if any."""
    goal, context = str(spec.goal or ""), str(spec.context or "")
    return f"{goal}\n\nContext:\n{context}" if context.strip() else goal


def call_until_stopped(fn: Callable[[], Any], stop: Any, tick: Callable[[], None] | None = None) -> Any:
    """Return ``fn()`` run in a worker thread, or ``None`` as soon as ``stop.is_set()``
    (also when ``fn`` returned just as the flag was set).  ``tick()`` is called in
    this thread while it waits (every :data:`POLL_SECONDS`): activity reports.

    Re-raises what ``fn`` raised.  A call abandoned on stop finishes in its
    (daemon) thread and its value is dropped.
    """
    done, box = threading.Event(), {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="model-call", daemon=True).start()
    while not done.wait(POLL_SECONDS) and not stop.is_set():
        if tick is not None:
            tick()
    if stop.is_set():  # the stop wins, even over a reply that arrived at the same moment
        return None
    if "error" in box:
        raise box["error"]
    return box["value"]


class BudgetClock:
    """The job's opt-in wall clock: sets ``stop`` with reason ``"timeout"`` once ``seconds`` have run
    (from :meth:`start`), not counting the time between :meth:`pause` and :meth:`resume` (a tool
    call waiting for a person, :mod:`child.approval`).  ``seconds`` None or 0: no limit (every
    method does nothing).  Thread-safe."""

    def __init__(self, stop: Any, seconds: float | None):
        self.stop, self.left = stop, float(seconds or 0)
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.since: float | None = None  # monotonic start of the running stretch (None: paused)

    def start(self) -> None:
        """Run the clock (again) for what is left of it."""
        with self.lock:
            if not self.left or self.since is not None:
                return
            self.since = time.monotonic()
            self.timer = threading.Timer(max(0.0, self.left), self.stop.set, args=("timeout",))
            self.timer.daemon = True
            self.timer.start()

    resume = start

    def pause(self) -> None:
        """Stop counting until :meth:`resume` (or for good: the run ended)."""
        with self.lock:
            if self.since is None:
                return
            self.left -= time.monotonic() - self.since
            self.since = None
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
