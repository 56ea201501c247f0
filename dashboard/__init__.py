"""The dashboard: a web page to watch and steer one hermesd, and ``/metrics`` for Prometheus.

A client of the daemon's sockets in a process of its own (``python -m dashboard``, started or found
by ``hermesctl dashboard``), never part of the daemon's loop: it reads through ``hermesd.sock`` and
``events.sock`` as ``hermesctl top`` does, keeps what the pages show in memory (fed by the event
log), and serves HTML rendered here (Starlette, uvicorn, Jinja2) with a little plain script
(``static/dash.js``) that takes live updates as server-sent events.  Module map:
docs/architecture.md, "The dashboard"."""
