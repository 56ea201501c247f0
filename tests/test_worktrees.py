"""A git worktree per child, with real git and real daemons (the scripted provider plays the model).

Three parallel delegations on one repository write the same file name, one of them commits, a
fourth writes nothing and delegates (its subagent gets a worktree of its own): each change is on its own branch ``hermes/JOB_ID`` in its own worktree,
the main checkout is untouched, the clean worktree is gone with its branch, and once a branch is
merged ``worktrees prune`` removes it.  A working directory in no repository is refused in one
line before anything starts (``delegation.worktree_isolation`` leaves such a job where it is and
gives every other one a worktree); a job resumed after a ``kill -9`` of the daemon keeps its worktree, a
cancelled one with changes keeps it, a failed one without loses it; the completion notification
names a kept one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.harness import DaemonProc, wait_for


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repo(base: Path) -> Path:
    repo = base / "repo"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.com")
    (repo / "src" / "app.py").write_text("print('hello')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def write(content: str, *then: dict[str, Any]) -> list[dict[str, Any]]:
    """A script: write notes.txt, then ``then`` (tool steps), then the final answer."""
    return [{"tool_calls": [{"name": "write_file", "input": {"path": "notes.txt", "content": content}}]},
            *then, {"text": "done"}]


def terminal(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "terminal", "input": {"command": command}}]}


def settled(d: DaemonProc, jobs: list[str]) -> list[dict[str, Any]]:
    """The ``worktrees --all`` entries of ``jobs`` once each is kept or removed."""
    def done() -> list[dict[str, Any]] | None:
        entries = {w["job"]: w for w in d.call("worktrees", all=True)["worktrees"]}
        if all(entries.get(j, {}).get("state") in ("kept", "removed") for j in jobs):
            return [entries[j] for j in jobs]
        return None

    return wait_for(done, 60, 0.05, "the worktrees to be settled")


def test_parallel_children_of_one_repository_each_work_on_their_own_branch(make_daemon, tmp_path):
    repo = make_repo(tmp_path)
    d = make_daemon({"delegation": {"max_concurrent_children": 4}})
    tasks = [{"goal": f"writer {i}", "script": write(f"from task {i}\n")} for i in range(3)]
    tasks[2]["script"] = write("from task 2\n", terminal("git add -A && git commit -q -m 'notes from task 2'"))
    nested = {"tool_calls": [{"name": "delegate_task", "input": {"goal": "look around", "worktree": True}}]}
    tasks.append({"goal": "reader", "toolsets": ["terminal", "file", "delegation"],
                  "script": [terminal("cat app.py"), nested, {"text": "read it"}]})
    group = d.call("spawn_parallel", tasks=tasks, cwd=str(repo / "src"), toolsets=["terminal", "file"],
                   worktree=True)
    jobs = [j["id"] for j in group["jobs"]]
    finals = [d.wait_job(j) for j in jobs]
    assert [f["status"] for f in finals] == ["completed"] * 4, finals

    for i, final in enumerate(finals[:3]):  # each change on its own branch, in its own worktree
        wt = final["worktree"]
        assert wt["branch"] == f"hermes/{final['id']}" and wt["changed"] is True, wt
        assert Path(wt["cwd"]) == Path(wt["path"]) / "src"
        assert (Path(wt["cwd"]) / "notes.txt").read_text() == f"from task {i}\n"
        assert Path(wt["path"]).parent.stat().st_mode & 0o777 == 0o700
        assert Path(wt["path"]).stat().st_mode & 0o777 == 0o700, "private as HERMES_HOME's folders are"
    assert finals[0]["worktree"]["changes"] == ["? src/notes.txt"] and finals[0]["worktree"]["commits"] == []
    committed = finals[2]["worktree"]
    assert committed["changes"] == [] and [c["subject"] for c in committed["commits"]] == ["notes from task 2"]
    assert git(repo, "log", "-1", "--format=%s", committed["branch"]).strip() == "notes from task 2"
    assert finals[3]["worktree"]["changed"] is False
    child = next(j for j in d.call("ps", all=True)["jobs"] if j["parent"] == jobs[3])  # its own, from the reader's
    assert child["status"] == "completed" and child["worktree"]["repo"] == finals[3]["worktree"]["path"], child
    assert Path(child["worktree"]["cwd"]) == Path(child["worktree"]["path"]) / "src"

    assert git(repo, "status", "--porcelain") == "" and not (repo / "src" / "notes.txt").exists()
    assert git(repo, "log", "-1", "--format=%s", "main").strip() == "initial"
    entries = settled(d, [*jobs, child["id"]])
    assert [w["state"] for w in entries] == ["kept", "kept", "kept", "removed", "removed"], entries
    assert not Path(entries[3]["path"]).exists()
    branches = set(git(repo, "branch", "--list", "hermes/*", "--format=%(refname:short)").split())
    assert branches == {f"hermes/{j}" for j in jobs[:3]}

    shown = d.ctl("result", jobs[2])
    assert f"worktree: {committed['path']} (branch hermes/{jobs[2]}, kept)" in shown.stdout, shown
    assert "notes from task 2" in shown.stdout
    assert f"[hermes/{jobs[0]} " in d.ctl("ps", "--all").stdout

    git(repo, "merge", "-q", "--ff-only", committed["branch"])  # merged: prune removes it, keeps the others
    pruned = json.loads(d.ctl("--json", "worktrees", "prune").stdout)
    assert [w["job"] for w in pruned["removed"]] == [jobs[2]], pruned
    assert sorted(w["job"] for w in pruned["kept"]) == sorted(jobs[:2])
    assert not Path(committed["path"]).exists()
    assert set(git(repo, "branch", "--list", "hermes/*", "--format=%(refname:short)").split()) == \
        {f"hermes/{j}" for j in jobs[:2]}
    listed = d.ctl("worktrees")
    assert listed.returncode == 0 and jobs[0] in listed.stdout and jobs[2] not in listed.stdout, listed


def test_outside_a_repository_nothing_starts_and_an_ended_job_keeps_only_a_changed_worktree(make_daemon, tmp_path):
    repo = make_repo(tmp_path)
    d = make_daemon({"delegation": {"worktree_isolation": True}})  # Hermes Agent's key: the default for all
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = d.ctl("delegate", "--worktree", "--cwd", str(plain), "write notes")
    assert refused.returncode == 14, refused
    assert refused.stderr.count("\n") == 1 and "not in a git repository" in refused.stderr, refused.stderr
    assert d.call("ps", all=True)["jobs"] == []
    outside = d.wait_job(d.call("delegate", goal="no repository, no default worktree", cwd=str(plain))["id"])
    assert outside["status"] == "completed" and "worktree" not in outside, outside

    def start(goal: str, script: list[dict[str, Any]]) -> str:  # no worktree: true, the config's default
        return d.call("delegate", goal=goal, cwd=str(repo), toolsets=["terminal", "file"],
                      background=True, script=script)["id"]

    resumed = start("write, then wait", write("before the restart\n", terminal("sleep 30")))
    cancelled = start("write, then be cancelled", write("cancelled midway\n", terminal("sleep 30")))
    failed = start("fail at once", [{"error": "the model is down"}])
    for job in (resumed, cancelled):
        log = d.home / "jobs" / job / "journal.jsonl"
        wait_for(lambda: log.exists() and log.read_text().count('"tool_started"') == 2, 60, 0.05, "the second tool")
    d.call("cancel", id=cancelled)
    assert d.wait_job(cancelled)["status"] == "cancelled" and d.wait_job(failed)["status"] == "failed"
    path = Path(d.call("job", id=resumed)["worktree"]["path"])
    d.kill9()
    d.start()
    final = d.wait_job(resumed)
    assert final["status"] == "completed" and final["resumes"] == 1, final
    assert final["worktree"]["path"] == str(path) and final["worktree"]["changes"] == ["? notes.txt"], final
    assert (path / "notes.txt").read_text() == "before the restart\n"
    entries = settled(d, [resumed, cancelled, failed])
    assert [w["state"] for w in entries] == ["kept", "kept", "removed"], entries
    assert not Path(entries[2]["path"]).exists() and git(repo, "branch", "--list", f"hermes/{failed}") == ""
    blocks = {e["job"]: e["data"]["block"] for e in
              d.call("events_since", since=0, types=["async_delegation"], limit=100)["events"]}
    assert f"Worktree: {path} (branch hermes/{resumed}, kept: 1 changed file(s), 0 commit(s))" in blocks[resumed]
    assert "Worktree: no changes" in blocks[failed], blocks[failed]


def test_a_repository_without_a_commit_fails_the_job_saying_so(make_daemon, tmp_path):
    """``git init`` and no commit yet: there is no HEAD to make the worktree from (git said
    ``fatal: not a valid object name: 'HEAD'``)."""
    fresh = tmp_path / "fresh"
    git(fresh.parent, "init", "-q", str(fresh))
    d = make_daemon()
    shown = d.ctl("delegate", "--worktree", "--cwd", str(fresh), "write notes")
    assert shown.returncode == 10, shown
    assert f"{fresh} has no commit yet: a job's worktree is made from HEAD" in shown.stdout, shown.stdout
    assert "error: could not create the job's git worktree" in shown.stdout and "Error:" not in shown.stdout
    assert "worktree: none was made (the job ended before creating" in shown.stdout, shown.stdout
    assert "removed with its branch" not in shown.stdout
    assert git(fresh, "worktree", "list").count("\n") == 1 and git(fresh, "branch", "--list") == ""


def test_worktrees_of_one_repository_made_and_removed_at_once_never_collide(tmp_path):
    """Sixteen children making their worktrees of one repository at the same moment (git alone
    fails some: a sibling's half-made administrative files), then all removed at once: the
    clean ones go with their branches, a changed one and a committed one stay."""
    from concurrent.futures import ThreadPoolExecutor

    from hermesd.worktrees import git as wt

    repo = make_repo(tmp_path)
    plans = [wt.plan(str(repo / "src"), f"job{i}", tmp_path / "worktrees") for i in range(16)]
    with ThreadPoolExecutor(len(plans)) as pool:
        assert all(pool.map(wt.create, plans))
    assert len({Path(p["cwd"]).resolve() for p in plans}) == 16 and all(Path(p["cwd"]).is_dir() for p in plans)
    (Path(plans[0]["cwd"]) / "new.txt").write_text("x")
    git(Path(plans[1]["path"]), "commit", "-q", "--allow-empty", "-m", "work")
    with ThreadPoolExecutor(len(plans)) as pool:
        list(pool.map(lambda p: wt.inspect(p)["changed"] or wt.remove(p), plans))
    assert [Path(p["path"]).exists() for p in plans] == [True, True] + [False] * 14
    assert git(repo, "branch", "--list", "hermes/*", "--format=%(refname:short)").split() == ["hermes/job0",
                                                                                             "hermes/job1"]
    assert wt.inspect(plans[0])["changes"] == ["? src/new.txt"] and wt.inspect(plans[1])["commit_count"] == 1
