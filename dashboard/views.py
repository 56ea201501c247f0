"""The pages: each a GET rendered here from the :class:`dashboard.index.Index` and the daemon's
replies, with its live parts (``data-live``) served again alone as fragments; each action a POST
that carries the CSRF token and answers with a redirect back (or a page saying why not)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.templating import Jinja2Templates

from client.connection import ClientError
from dashboard import auth, charts, conversation, live, metrics
from dashboard.index import Index, matches
from dashboard.runs import RunFiles
from hermesd.contract.providers import PROVIDER_WAIT
from hermesd.contract.states import TERMINAL
from hermesd.protocol import ProtocolError

HERE = Path(__file__).parent
PAGE_ROWS = 100
JOURNALS = 64
"""Jobs whose journal entries the job page keeps (read again only from where it stopped)."""
STATUS_CODES = {"not_found": 404, "invalid_state": 409, "bad_request": 400, "too_large": 413,
                "capacity_reached": 429, "forbidden": 403}


class Views:
    """The pages of one dashboard: ``link`` (requests), ``index`` (jobs), ``hub`` (live updates),
    ``token`` (for the CSRF token), ``read_only`` (no buttons, no actions)."""

    def __init__(self, link: Any, index: Index, feed: Any, token: str, read_only: bool):
        self.link, self.index, self.feed = link, index, feed
        self.csrf, self.read_only = auth.csrf_token(token), read_only
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(age=age, money=money, tokens_of=tokens_of, short=short,
                                          TERMINAL=TERMINAL, when=when)
        self.hub = live.Hub(self.render_row, lambda: self.link.call("approvals.list", follow=True),
                            lambda: self.index.last_seq)
        self.registry = metrics.registry(link, index)
        self.runs: dict[str, RunFiles] = {}
        self.journals: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # job → (offset read to, entries), newest last

    # helpers --------------------------------------------------------------

    def page(self, request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        """Template ``name`` with the shared values (the CSRF token, read-only, the daemon's state)."""
        return self.templates.TemplateResponse(request, name, {
            "csrf": self.csrf, "read_only": self.read_only, "up": self.feed.up, "why": self.feed.why,
            "seq": self.hub.generation_seq,
            "path": request.url.path, **values}, status_code=status)

    async def ask(self, op: str, ttl: float | None = None, **args: Any) -> Any:
        """A daemon request off the loop (``ttl``: from the shared cache, if no news came since: the
        Hub's :attr:`dashboard.live.Hub.generation`)."""
        if ttl is not None:
            return await run_in_threadpool(self.link.cached, op, ttl, self.hub.generation, **args)
        return await run_in_threadpool(self.link.call, op, **args)

    def failed(self, request: Request, err: Exception) -> HTMLResponse:
        """A page saying what the daemon answered (or that it cannot be reached)."""
        code = getattr(err, "code", "daemon_not_running")
        status = STATUS_CODES.get(code, 502 if isinstance(err, ClientError) else 500)
        return self.page(request, "error.html", status, code=code, message=getattr(err, "message", str(err)))

    def render_row(self, job_id: str) -> tuple[dict[str, Any], str] | None:
        """One job's row of the jobs page as HTML (the live ``rows`` message)."""
        rec = self.index.get(job_id)
        if rec is None:
            return None
        template = self.templates.env.get_template("_job_row.html")
        return rec, template.render(row={"depth": 0, "rec": rec, "holder": None, "children": 0},
                                    waiting=self.index.waiting(job_id))

    # jobs -----------------------------------------------------------------

    def filters(self, request: Request) -> dict[str, Any]:
        """The jobs page's filters from the query: ``kind``, ``state``, ``q`` (text), ``offset``."""
        q = request.query_params
        try:
            offset = max(0, int(q.get("offset") or 0))
        except ValueError:
            offset = 0
        return {"kind": q.get("kind") or None, "state": q.get("state") or None, "q": (q.get("q") or "").strip() or None,
                "offset": offset}

    def counted(self, f: dict[str, Any]) -> dict[str, Any]:
        """The jobs page's heading for filters ``f``: ``tally`` (:meth:`Index.tally`) and
        ``approvals`` (how many requests wait for a person)."""
        return {"tally": self.index.tally(f["kind"], f["state"], f["q"]), "approvals": len(self.index.approvals)}

    async def jobs(self, request: Request, part: bool = False) -> Response:
        """``/``: the job tree, newest first, with filters (``/jobs/part``: its rows alone)."""
        f = self.filters(request)
        rows, total = self.index.rows(f["kind"], f["state"], f["q"], PAGE_ROWS, f["offset"])
        waiting = {a.get("job") for a in self.index.approvals.values()}
        return self.page(request, "_job_rows.html" if part else "jobs.html", rows=rows, total=total, f=f, kinds=self.index.kinds(),
                         states=["live", "ended", "queued", "running", "completed", "failed", "cancelled",
                                 "interrupted", "timed_out", "lost"], page_rows=PAGE_ROWS, waiting=waiting,
                         **self.counted(f))

    async def counts(self, request: Request) -> Response:
        """``/jobs/counts``: the jobs page's heading alone (its live part: jobs added or ended, requests waiting)."""
        f = self.filters(request)
        return self.page(request, "_job_counts.html", f=f, **self.counted(f))

    async def stream(self, request: Request) -> Response:
        """``/live``: server-sent events for one page (``?rows=1`` and the jobs filters: its rows too)."""
        rows = None
        if request.query_params.get("rows"):
            f = self.filters(request)
            rows = (lambda rec: matches(rec, f["kind"], f["state"], f["q"])) if (f["kind"] or f["state"] or f["q"]) \
                else (lambda rec: True)
        sub = live.Subscriber(rows)
        return StreamingResponse(self.hub.stream(sub), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    # one job --------------------------------------------------------------

    async def job_parts(self, job_id: str) -> dict[str, Any]:
        """What the job page shows: the record (``result``), its conversation, children, approvals."""
        rec = await self.ask("result", id=job_id)
        offset, entries = self.journals.pop(job_id, (0, []))
        while True:  # only what was appended since this job's page was last drawn
            page = await self.ask("journal", id=job_id, offset=offset)
            entries = entries + page["entries"]
            if page["offset"] == offset or page["offset"] >= page["size"]:
                break
            offset = page["offset"]
        self.journals[job_id] = (page["offset"], entries)
        while len(self.journals) > JOURNALS:
            self.journals.pop(next(iter(self.journals)))
        turns = conversation.from_journal(entries)
        if not turns and rec.get("status") in TERMINAL:
            turns = conversation.from_trajectory((await self.ask("result", id=job_id, trajectory=True)).get("trajectory"))
        kids = self.index.kids(job_id)
        return {"rec": rec, "turns": turns, "kids": kids[:200], "kid_count": len(kids),
                "waiting": self.index.waiting(job_id), "live": rec.get("status") not in TERMINAL}

    async def shown(self, request: Request, parts: Any, template: str, **values: Any) -> Response:
        """``template`` with what the awaitable ``parts`` gives, or the page saying why not."""
        try:
            got = await parts
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        return self.page(request, template, **values, **got)

    @staticmethod
    def alone(method: Any) -> Any:
        """The endpoint of a page's live part: ``method`` with ``part=True``."""
        async def endpoint(request: Request) -> Response:
            return await method(request, part=True)

        endpoint.__doc__ = f"{method.__doc__} (its live part alone)"
        return endpoint

    async def job(self, request: Request, part: bool = False) -> Response:
        """``/job/ID``: goal, context, conversation, log, trace, usage, children, buttons."""
        return await self.shown(request, self.job_parts(request.path_params["id"]),
                                "_job_body.html" if part else "job.html")

    async def log(self, request: Request) -> Response:
        """``/job/ID/log?offset=N``: the log from byte N (JSON ``{data, offset, done}``; the page follows it)."""
        try:
            offset = int(request.query_params.get("offset") or -32768)
            answer = await self.ask("logs", id=request.path_params["id"], offset=offset, limit=65536)
        except ValueError:
            return JSONResponse({"error": "offset must be an integer"}, 400)
        except (ProtocolError, ClientError) as err:
            return JSONResponse({"error": getattr(err, "message", str(err))}, 502)
        return JSONResponse({"data": answer["data"], "offset": answer["offset"], "done": answer["done"]})

    # actions --------------------------------------------------------------

    @staticmethod
    def actions(area: str, form: Any) -> dict[str, tuple[str, dict[str, Any]]]:
        """The actions of ``area`` (``job``, ``approval``, ``kanban``; else none): each name →
        ``(op, args)``, the args from the posted ``form`` (None: not given).  The daemon checks
        them (an empty title or message is its ``bad_request``, shown on the page)."""
        def given(key: str) -> str | None:
            return str(form.get(key) or "").strip() or None

        by = "the dashboard"
        return {
            "job": {"cancel": ("cancel", {}), "retry": ("retry", {}),
                    "steer": ("steer", {"message": str(form.get("message") or "")})},
            "approval": {"approve": ("approvals.approve", {"by": by}),
                         "deny": ("approvals.deny", {"by": by, "reason": given("reason")})},
            "kanban": {"create": ("kanban.create", {"title": str(form.get("title") or ""), "assignee": given("assignee"),
                                                    "body": given("body"), "board": given("board"),
                                                    "triage": bool(form.get("triage")), "author": by}),
                       "unblock": ("kanban.unblock", {"note": given("note"), "author": by}),
                       "archive": ("kanban.archive", {"author": by})},
        }.get(area, {})

    async def act(self, request: Request) -> Response:
        """``POST /job/ID/{cancel,retry,steer}``, ``POST /approval/ID/{approve,deny}``, ``POST
        /kanban/create``, ``POST /kanban/ID/{unblock,archive}``: checked (read-only, CSRF token),
        sent, then back to the page the form was on."""
        form = await request.form()
        if self.read_only:
            return self.page(request, "error.html", 403, code="read_only",
                             message="this dashboard is read-only (dashboard.read_only): actions are refused")
        if not auth.same(str(form.get("csrf") or ""), self.csrf):
            return self.page(request, "error.html", 403, code="csrf", message="refused: the form's CSRF token is "
                             "missing or wrong (reload the page)")
        what, target = request.path_params["action"], request.path_params.get("id")
        ops = self.actions(request.url.path.split("/")[1], form)
        if what not in ops or (target is None) != (what == "create"):  # creating is the one action on no id
            return self.page(request, "error.html", 404, code="not_found", message=f"no action {what!r} here")
        op, args = ops[what]
        if target is not None:
            args = {"id": target, **args}
        try:
            answer = await self.ask(op, **{k: v for k, v in args.items() if v is not None})
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        back = str(form.get("back") or "/")
        if what == "retry" and answer.get("id"):
            back = f"/job/{answer['id']}"
        if not back.startswith("/") or back.startswith("//"):
            back = "/"
        return RedirectResponse(back, 303)

    # approvals ------------------------------------------------------------

    async def approvals(self, request: Request, part: bool = False) -> Response:
        """``/approvals``: pending requests, what they would run and why they were held."""
        try:
            pending = (await self.ask("approvals.list", 0.5))["approvals"]
            recent = (await self.ask("approvals.list", 2.0, state="all"))["approvals"][-20:][::-1]
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        return self.page(request, "_approvals.html" if part else "live.html", title="Approvals", live="/approvals/part",
                         topics="approvals", body="_approvals.html", pending=pending,
                         recent=[r for r in recent if r.get("state") != "pending"],
                         jobs={r["job"]: self.index.get(r["job"]) for r in pending})

    # batches --------------------------------------------------------------

    async def batches(self, request: Request) -> Response:
        """``/batches``: every batch run."""
        try:
            runs = (await self.ask("batch.list", 1.0))["batches"]
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        return self.page(request, "batches.html", runs=runs[::-1])

    async def batch_parts(self, job_id: str) -> dict[str, Any]:
        """What the batch page shows: its record, samples, rewards, failures, statistics, files."""
        rec = await self.ask("batch.status", 1.0, id=job_id)
        files = self.runs.setdefault(rec["run_dir"], RunFiles(rec["run_dir"]))
        samples = await run_in_threadpool(files.refresh)
        rewards = [s.reward for s in samples if s.reward is not None]
        checkpoint = files.json_file("checkpoint.json")
        failed = []
        for index, entry in sorted((checkpoint.get("failed") or {}).items(), key=lambda kv: int(kv[0]))[:100]:
            item = self.index.get(entry.get("job") or "") or {}
            failed.append({"index": int(index), "error": entry.get("error"), "status": entry.get("status"),
                           "attempts": entry.get("attempts"), "job": entry.get("job"), "prompt": item.get("goal")})
        progress = rec.get("progress") or {}
        governed = sum(1 for k in self.index.kids(job_id) if k.get("status") not in TERMINAL
                       and str(k.get("activity") or "").startswith(PROVIDER_WAIT))
        return {"rec": rec, "progress": progress, "samples": samples[-200:][::-1], "sample_count": len(samples),
                "hist": charts.histogram(rewards), "rewards": progress.get("rewards"), "failed": failed,
                "statistics": files.json_file("statistics.json"), "files": files.files(), "governed": governed,
                "live": rec.get("status") not in TERMINAL}

    async def batch(self, request: Request, part: bool = False) -> Response:
        """``/batch/ID``: progress, errors, failed prompts, rewards, samples, statistics, files."""
        return await self.shown(request, self.batch_parts(request.path_params["id"]),
                                "_batch_body.html" if part else "batch.html")

    async def samples(self, request: Request) -> Response:
        """``/batch/ID/samples?i=N[&j=M]``: one sample's trajectory, or two side by side."""
        try:
            rec = await self.ask("batch.status", 1.0, id=request.path_params["id"])
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        files = self.runs.setdefault(rec["run_dir"], RunFiles(rec["run_dir"]))
        await run_in_threadpool(files.refresh)
        shown = []
        for key in ("i", "j"):
            value = request.query_params.get(key)
            if value is None or not value.lstrip("-").isdigit():
                continue
            line = files.line(int(value))
            shown.append({"index": int(value), "line": line,
                          "turns": conversation.from_trajectory(line) if line else []})
        return self.page(request, "samples.html", rec=rec, shown=shown, indexes=sorted(files.samples))

    # the bill, the governor, Kanban ---------------------------------------

    async def bill_parts(self) -> dict[str, Any]:
        """Spend per day, model, kind and top jobs; budgets left; the governor; the cache's read share."""
        status = await self.ask("status", 1.0)
        by_day = (await self.ask("usage", 2.0, by="day"))
        by_model = (await self.ask("usage", 2.0, by="model"))
        by_job = (await self.ask("usage", 2.0, by="job"))
        kinds: dict[str, float] = defaultdict(float)
        for row in by_job["rows"]:
            kinds[(self.index.get(str(row["key"])) or {}).get("kind") or row.get("kind") or "?"] += row.get("cost_usd") or 0
        top = sorted(by_job["rows"], key=lambda r: (r.get("cost_usd") or 0, r.get("input") or 0), reverse=True)[:10]
        total = by_day["total"]
        share = (total.get("cache_read") or 0) / total["input"] if total.get("input") else None
        spend = status.get("spend") or {}
        today = spend.get("today") or {}
        budgets = [{"name": name, "limit": spend[name], "used": used, "left": max(0.0, spend[name] - used)}
                   for name, used in (("daily_cost_usd", today.get("cost_usd") or 0), ("daily_tokens", today.get("tokens") or 0))
                   if spend.get(name)]
        return {"days": charts.bars([(r["key"], r.get("cost_usd") or 0) for r in by_day["rows"][-30:]]),
                "models": charts.bars([(str(r["key"]), r.get("cost_usd") or 0) for r in by_model["rows"]]),
                "kinds": charts.bars(sorted(kinds.items(), key=lambda kv: -kv[1])),
                "top": top, "total": total, "share": share, "budgets": budgets, "today": today,
                "governor": status.get("governor") or [], "now": time.time(), "model_rows": by_model["rows"]}

    async def bill(self, request: Request, part: bool = False) -> Response:
        """``/bill``: the bill and the governor."""
        return await self.shown(request, self.bill_parts(), "_bill_body.html" if part else "live.html",
                                title="The bill and the governor", live="/bill/part", topics="bill",
                                body="_bill_body.html")

    async def kanban(self, request: Request, part: bool = False) -> Response:
        """``/kanban``: the board's columns and cards; unless read-only, a form for a new task and
        each card's actions (unblock a blocked or triage card, archive one)."""
        try:
            board = await self.ask("kanban.list", 0.5)
        except (ProtocolError, ClientError) as err:
            return self.failed(request, err)
        columns: dict[str, list[dict[str, Any]]] = {s: [] for s in ("triage", "todo", "ready", "running", "blocked", "done")}
        for task in board.get("tasks") or []:
            columns.setdefault(task.get("status") or "?", []).append(task)
        return self.page(request, "_kanban.html" if part else "kanban.html", columns=columns,
                         profiles=board.get("profiles") or [], boards=board.get("boards") or [])

    async def metrics(self, request: Request) -> Response:
        """``/metrics``: Prometheus' text format (``prometheus_client``)."""
        body = await run_in_threadpool(metrics.render, self.registry)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


# template helpers ----------------------------------------------------------

def epoch(text: str | None) -> float | None:
    """An ISO 8601 UTC time as epoch seconds (None when missing or unreadable)."""
    if not text:
        return None
    import datetime

    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def age(rec: dict[str, Any]) -> str:
    """How long ago a job was dispatched: ``42s``, ``3m``, ``5h``, ``2d``."""
    start = epoch(rec.get("dispatched_at"))
    if start is None:
        return "-"
    seconds = max(0.0, time.time() - start)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def when(value: Any) -> str:
    """Epoch seconds or ISO text as ``HH:MM:SS`` UTC (the date too when not today)."""
    import datetime

    stamp = value if isinstance(value, (int, float)) else epoch(value)
    if stamp is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M")


def money(rec: dict[str, Any] | None) -> str:
    """A record's cost: ``$0.0123``, with ``+?`` when some tokens had no price."""
    rec = rec or {}
    cost = float(rec.get("cost_usd") or 0)
    return f"${cost:.4f}" + ("+?" if rec.get("cost_unknown") else "")


def tokens_of(rec: dict[str, Any] | None) -> int:
    """Input plus output tokens of a record (``tokens`` map, or flat ``input``/``output``)."""
    rec = rec or {}
    tokens = rec.get("tokens") if isinstance(rec.get("tokens"), dict) else rec
    return int(tokens.get("input") or 0) + int(tokens.get("output") or 0)


def short(text: Any, width: int = 80) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= width else line[: width - 1] + "…"
