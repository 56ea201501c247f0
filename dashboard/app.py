"""The dashboard's ASGI application: routes, static files, the token guard, start and stop.

:func:`build` puts together the :class:`dashboard.link.Link`, the :class:`dashboard.index.Index`
fed by a :class:`dashboard.link.Feed`, the :class:`dashboard.views.Views` and the
:class:`dashboard.auth.Guard` around all of it (Starlette)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dashboard.auth import Guard
from dashboard.index import Index
from dashboard.link import Feed, Link
from dashboard.views import HERE, Views


def build(runtime_dir: str | Path | None, token: str, *, read_only: bool = False,
          metrics_public: bool = False, on_up: Callable[[], None] | None = None) -> Any:
    """The guarded ASGI app for the daemon of ``runtime_dir`` (None: the environment's);
    ``on_up`` is called (in the feed's thread) each time the daemon answers after it did not."""
    index = Index()
    link = Link(runtime_dir)
    holder: dict[str, Views] = {}
    feed = Feed(runtime_dir, index, link, lambda topics, rows: holder["views"].hub.changed(topics, rows), on_up)
    views = holder["views"] = Views(link, index, feed, token, read_only)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        views.hub.start()
        feed.start()
        try:
            yield
        finally:
            feed.close()
            link.close()

    routes = [
        Route("/", views.jobs), Route("/jobs/part", views.alone(views.jobs)), Route("/jobs/counts", views.counts),
        Route("/live", views.stream),
        Route("/job/{id}", views.job), Route("/job/{id}/part", views.alone(views.job)), Route("/job/{id}/log", views.log),
        Route("/job/{id}/{action}", views.act, methods=["POST"]),
        Route("/approvals", views.approvals), Route("/approvals/part", views.alone(views.approvals)),
        Route("/approval/{id}/{action}", views.act, methods=["POST"]),
        Route("/batches", views.batches), Route("/batch/{id}", views.batch),
        Route("/batch/{id}/part", views.alone(views.batch)),
        Route("/batch/{id}/samples", views.samples),
        Route("/bill", views.bill), Route("/bill/part", views.alone(views.bill)),
        Route("/kanban", views.kanban), Route("/kanban/part", views.alone(views.kanban)),
        Route("/kanban/{action}", views.act, methods=["POST"]), Route("/kanban/{id}/{action}", views.act, methods=["POST"]),
        Route("/metrics", views.metrics),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.views = views
    return Guard(app, token, metrics_public=metrics_public)
