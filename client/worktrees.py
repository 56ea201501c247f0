"""``hermesctl worktrees [--all]`` and ``hermesctl worktrees prune``: the jobs' git worktrees (the
daemon's ``worktrees`` and ``worktrees.prune`` ops say what each does)."""

from __future__ import annotations

from typing import Any

import click

from client import render
from client.common import conn, is_json, json_option, out, print_all


def entry_line(w: dict[str, Any]) -> str:
    """One worktree: job, its state, the job's status, then its path, branch, changes and commits."""
    lines = render.worktree_lines({**w, "state": w["state"] if w["exists"] or w["state"] == "removed" else "missing"})
    return f"{w['job']:<18} {w['state']:<9} {w['status']:<10} {w.get('repo') or ''}\n" + \
        "\n".join(f"    {line}" for line in lines)


@click.group("worktrees", invoke_without_command=True)
@json_option
@click.option("--all", "show_all", is_flag=True, help="Removed ones too.")
@click.pass_context
def worktrees_group(ctx: click.Context, show_all: bool) -> None:
    """The git worktrees of jobs run with --worktree (path, branch hermes/JOB_ID, what they hold);
    `worktrees prune` removes those without changes."""
    if ctx.invoked_subcommand is None:
        answer = conn().call("worktrees", all=show_all)
        print_all(answer["worktrees"], entry_line, "no worktrees")


@worktrees_group.command("prune")
@json_option
def prune_command() -> None:
    """Remove the worktrees (and branches) of ended jobs that hold no change: clean ones, and
    those whose branch has been merged into another branch; keep the rest."""
    answer = conn().call("worktrees.prune", _timeout=max(conn().timeout, 600.0))
    if is_json():
        render.emit_json(answer)
        return
    for w in answer["removed"]:
        out(f"removed {w['path']} and branch {w['branch']} ({w['job']})")
    for w in answer["kept"]:
        out(f"kept {w['path']} (branch {w['branch']}, {render.counted(w.get('changed_files'), 'changed file')}, "
            f"{render.counted(w.get('commit_count'), 'commit')} of its own)" + (f": {w['error']}" if w.get("error") else ""))
    if not answer["removed"] and not answer["kept"]:
        out("no worktrees of ended jobs")


COMMANDS = (worktrees_group,)
