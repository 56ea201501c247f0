"""Terminal commands in containers (podman with runc, a busybox image made here).

Real daemons, real podman, a real image imported from a busybox-static root
filesystem (``tests/containers.py``; with git for the jobs with a worktree).  Every test removes the containers of
its own daemons (by their ``hermes.state_dir`` label, under the test's
temporary directory) even when it fails.  Without podman, runc and
busybox-static the podman tests are skipped with what to install; ``.ci/run``
installs them.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from child.container import SLEEP_SECONDS, Container, ContainerError, opened, ulimit_args
from hermesd import config as config_mod
from hermesd.containers import engine as containers
from hermesd.contract.wire import JobSpec
from hermesd.protocol import ProtocolError
from tests.chaos.helpers import delegate_warm, forkserver, wait_warm
from tests.containers import (APT_HINT, ensure_git_image, ensure_image, git_files, kill_orphans, labelled_under,
                              podman, remove_under, runc_orphans)
from tests.harness import wait_for
from tests.test_batch_daemon import finish, read_run, start, write_dataset
from tests.test_worktrees import git, make_repo

ENGINE = podman()
needs_podman = pytest.mark.skipif(ENGINE is None, reason=f"podman, runc and busybox-static are needed: {APT_HINT}")
CONFIG = {"terminal": {"runtime": "runc"}}
MISSING_ENGINE = {"terminal": {"engine_path": "/nonexistent/podman"}}


@pytest.fixture(scope="session")
def image(tmp_path_factory) -> str:
    """The test image, imported once."""
    return ensure_image(ENGINE, tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="session")
def git_image(tmp_path_factory) -> str:
    """The test image with git, imported once (the test is skipped without git or ldd)."""
    if git_files() is None:
        pytest.skip("git and ldd are needed for the test image with git: apt-get install git")
    return ensure_git_image(ENGINE, tmp_path_factory.mktemp("git-image"))


@pytest.fixture
def boxed(tmp_path, image):
    """The image; at the end every container of this test's daemons is removed, and the
    test fails if one still runs that podman forgot (it is ended too)."""
    before = runc_orphans(ENGINE)
    yield image
    remove_under(ENGINE, tmp_path)
    leaked = runc_orphans(ENGINE) - before
    kill_orphans(leaked)
    assert not leaked, f"containers still running in runc, unknown to podman: {sorted(leaked)}"


def of_job(job_id: str) -> list[str]:
    """Ids of the containers labelled with ``job_id``."""
    return subprocess.run([*ENGINE, "ps", "-aq", "--filter", f"label=hermes.job={job_id}"],
                          capture_output=True, text=True, check=True).stdout.split()


def terminal_step(command: str) -> dict:
    return {"thinking": "I think it over.", "tool_calls": [{"name": "terminal", "input": {"command": command}}]}


# without an engine ---------------------------------------------------------------------------

def test_no_engine_is_refused_at_submit_naming_the_job_or_the_line(make_daemon, tmp_path):
    daemon = make_daemon(MISSING_ENGINE)
    with pytest.raises(ProtocolError) as err:
        daemon.delegate("boxed", image="busybox:latest")
    assert err.value.code == "bad_request"
    assert "image 'busybox:latest'" in err.value.message and "install podman" in err.value.message
    assert err.value.message.startswith("job deleg_")
    assert daemon.call("ps", all=True)["jobs"] == []
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "b", "docker_image": "python:3.12"}])
    with pytest.raises(ProtocolError) as err:
        start(daemon, dataset, "boxed")
    assert err.value.code == "bad_request"
    assert err.value.message.startswith(f"{dataset}:2: docker_image 'python:3.12': no container engine found")
    assert "apt-get install podman" in err.value.message and not (daemon.base / "out" / "boxed").exists()
    result = daemon.ctl("delegate", "--image", "busybox", "goal")
    assert result.returncode != 0 and "install podman" in result.stderr and "Traceback" not in result.stderr


def test_prepare_rejects_option_like_images_and_the_config_a_backend_without_image(tmp_path):
    with pytest.raises(config_mod.ConfigError, match=r"^x.yaml:2: terminal.backend: podman runs .* terminal.image"):
        config_mod.parse("model: m\nterminal: {backend: podman}\n", "x.yaml")
    config = config_mod.parse("terminal: {backend: podman, image: 'a:1', engine_path: /bin/true}\n")
    fields = {"spec": {"image": "--privileged"}}
    with pytest.raises(ProtocolError, match="not an image reference"):
        containers.prepare(config, "deleg_1", fields)
    local = config_mod.parse(f"supervisor: {{state_dir: {tmp_path}}}\n")
    fields = {"spec": {"max_turns": 2}}
    containers.prepare(local, "deleg_1", fields)
    assert fields == {"spec": {"max_turns": 2}}  # on the host: nothing added
    default = config_mod.parse(f"terminal: {{backend: podman, image: 'x:1', engine_path: /bin/true, runtime: runc}}\n"
                               f"supervisor: {{state_dir: {tmp_path}}}\n")
    containers.prepare(default, "deleg_2", fields)
    box = fields["spec"]["container"]
    assert box["engine"] == ["/bin/true", "--runtime", "runc"] and box["image"] == "x:1" and not box["network"]
    assert box["labels"] == {"hermes.job": "deleg_2", "hermes.state_dir": str(tmp_path.resolve())}
    # what the child receives: the contract's JobSpec keeps it (from_wire drops unknown keys)
    assert JobSpec.from_wire({"job": "deleg_2", **fields["spec"]}).to_wire()["container"] == box


def test_ulimits_never_exceed_the_processs_own():
    args = ulimit_args(max_processes=10**9)
    values = dict(a.split("=", 1) for a in args[1::2])
    assert {"nofile", "nproc"} <= set(values)
    for name, pair in values.items():
        soft, hard = (int(v) for v in pair.split(":"))
        own_soft, own_hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))
        for mine, own in ((soft, own_soft), (hard, own_hard)):
            assert own == resource.RLIM_INFINITY or 0 <= mine <= own, (name, pair)
    assert dict(a.split("=", 1) for a in ulimit_args(max_processes=7)[1::2])["nproc"].split(":")[1] == "7"


def test_file_tools_take_paths_under_the_mount_point(tmp_path):
    box = Container({"engine": ["podman"], "workdir": "/workspace", "image": "x", "name": "n"}, str(tmp_path))
    assert box.host_path("/workspace/a/b.txt") == "a/b.txt" and box.host_path("/workspace") == "."
    assert box.host_path("/workspacex/a") == "/workspacex/a" and box.host_path("rel.txt") == "rel.txt"


def test_a_job_with_a_worktree_mounts_its_top_level_and_the_repositorys_git_directory(tmp_path):
    repo = make_repo(tmp_path).resolve()
    top = tmp_path.resolve() / "worktrees" / "j1"
    git(repo, "worktree", "add", "-q", "-b", "hermes/j1", str(top), "HEAD")
    plan = {"repo": str(repo), "path": str(top), "branch": "hermes/j1", "cwd": str(top / "src")}
    desc = {"engine": ["podman"], "workdir": "/workspace", "image": "x", "name": "n"}
    box = Container(desc, plan["cwd"], plan)
    # the worktree at the mount point, the commands in the job's directory below it, and git's files
    # where the worktree's .git file and the repository's record of it name them
    assert box.workdir == "/workspace/src"
    assert box.mounts() == [(str(top), "/workspace"), (str(repo / ".git"), str(repo / ".git")), (str(top), str(top))]
    assert box.host_path("/workspace/src/a.txt") == "a.txt" and box.host_path("/workspace/b.txt") == "../b.txt"
    assert box.inside_path("tools") == "/workspace/src/tools" and box.inside_path(str(top / "x")) == "/workspace/x"
    assert box.inside_path("/opt/x") == "/opt/x"
    alone = Container(desc, str(tmp_path))  # no worktree: the directory alone
    assert alone.workdir == "/workspace" and alone.mounts() == [(str(tmp_path.resolve()), "/workspace")]
    over = Container({**desc, "workdir": str(repo)}, plan["cwd"], plan)  # the git directory would be under it
    why = f"cannot mount {repo}/.git at {repo}/.git in the container: it would overlap {repo}, where the job's"
    with pytest.raises(ContainerError, match=re.escape(why)):
        over.mounts()
    (top / ".git").unlink()
    with pytest.raises(ContainerError, match=r"cannot give git in the container the job's worktree: cannot read"):
        box.mounts()


def test_a_command_inside_gets_the_jobs_variables_by_name_never_their_values_on_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_PASS_ENV", "STAGE,DEPLOY_KEY,UNSET_ONE")
    monkeypatch.setenv("STAGE", "production")
    monkeypatch.setenv("DEPLOY_KEY", "deploy-key-value-1")
    box = Container({"engine": ["podman"], "workdir": "/workspace", "image": "x", "name": "n"}, str(tmp_path))
    argv = box.exec_argv("env", {"SAMPLE": "s"})
    assert argv[:8] == ["podman", "exec", "--env", "DEPLOY_KEY", "--env", "STAGE", "--env", "SAMPLE=s"]
    assert "deploy-key-value-1" not in " ".join(argv) and "UNSET_ONE" not in argv


# with podman ---------------------------------------------------------------------------------

@needs_podman
def test_a_job_in_a_container_gets_its_variables_and_a_secrets_value_is_redacted(make_daemon, tmp_path, boxed):
    daemon = make_daemon(CONFIG, env={"GH_TOKEN": "ghp_daemons-own-token-0123"})
    work = tmp_path / "w"
    work.mkdir()
    script = [terminal_step('printf %s "$DEPLOY_KEY" > key.txt; echo "to $STAGE with $DEPLOY_KEY, gh=${GH_TOKEN:-unset}"'),
              {"thinking": "I think it over.", "text": "done"}]
    job = daemon.delegate("boxed", cwd=str(work), image=boxed, script=script, toolsets=["terminal"],
                          env={"STAGE": "production"}, secrets={"DEPLOY_KEY": "deploy-key-value-1"})
    final = daemon.wait_job(job["id"])
    assert final["status"] == "completed", final
    assert (work / "key.txt").read_text() == "deploy-key-value-1"
    trajectory = (daemon.home / "jobs" / job["id"] / "trajectory.json").read_text()
    assert "to production with [REDACTED:DEPLOY_KEY], gh=unset" in trajectory


@pytest.mark.slow
@needs_podman
def test_a_batch_runs_the_prompts_with_docker_image_in_containers(make_daemon, tmp_path, boxed):
    daemon = make_daemon(CONFIG)
    command = "hostname > host.txt; ls / > root.txt; cat /proc/net/dev > net.txt; pwd > where.txt"
    script = [terminal_step(command), {"thinking": "I think it over.", "text": "ok"}]
    entries = []
    for i in range(6):
        (tmp_path / f"p{i}").mkdir()
        entries.append({"prompt": f"p{i}", "cwd": str(tmp_path / f"p{i}"), "script": script,
                        **({"docker_image": boxed} if i % 2 else {})})
    verifier = 'printf \'{"reward": 1, "host": "%s"}\' "$(hostname)"'  # where the verifier runs
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", entries), "boxes", num_workers=6, verifier=verifier)
    final = finish(daemon, record)
    assert final["status"] == "completed"
    lines = {ln["prompt_index"]: ln for lns in read_run(Path(final["run_dir"]))["batches"].values() for ln in lns}
    items = daemon.call("ps", all=True, kind="batch_item")["jobs"]
    assert len(items) == 6 and {j["status"] for j in items} == {"completed"}
    host_root = sorted(name for name in os.listdir("/") if not name.startswith("."))  # as ls shows it
    for i in range(6):
        where = tmp_path / f"p{i}"
        name, root = (where / "host.txt").read_text().strip(), sorted((where / "root.txt").read_text().split())
        assert lines[i]["reward"] == 1.0, lines[i]["verifier"]
        if i % 2:  # the verifier ran in the item's own container, where its agent's commands ran
            assert lines[i]["verifier"]["details"]["host"] == name
            assert name != socket.gethostname() and root != host_root and "workspace" in root
            assert (where / "where.txt").read_text().strip() == "/workspace"
            interfaces = [line.split(":")[0].strip() for line in (where / "net.txt").read_text().splitlines()[2:]]
            assert interfaces == ["lo"]  # no network by default
        else:
            assert name == socket.gethostname() and root == host_root
            assert (where / "where.txt").read_text().strip() == str(where)
    for job in items:
        wait_for(lambda: not of_job(job["id"]), 30, what=f"the container of {job['id']} removed")
    assert labelled_under(ENGINE, daemon.home) == []


@needs_podman
def test_a_memory_limit_boxes_the_container_not_the_engine(make_daemon, tmp_path, boxed):
    # under the child's RLIMIT_AS the engine could not start: the limit is the container's --memory
    daemon = make_daemon({**CONFIG, "child_limits": {"memory_mb": 512}})
    work = tmp_path / "w"
    work.mkdir()
    script = [terminal_step("cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes"
                            " > limit.txt 2>/dev/null; echo limited >> limit.txt"), {"thinking": "I think it over.", "text": "done"}]
    job = daemon.delegate("boxed with a limit", cwd=str(work), image=boxed, script=script, toolsets=["terminal"])
    final = daemon.wait_job(job["id"])
    assert final["status"] == "completed", final
    seen = (work / "limit.txt").read_text()
    assert "limited" in seen and str(512 * 1024 * 1024) in seen, seen


@needs_podman
def test_a_warm_child_runs_its_commands_in_the_container(make_daemon, tmp_path, boxed):
    """Warm start (a spare forked by the zygote) and a container: the spec reaches the spare's agent."""
    daemon = make_daemon(forkserver(CONFIG))
    wait_warm(daemon)
    work = tmp_path / "w"
    work.mkdir()
    script = [terminal_step("hostname > host.txt; ls / > root.txt; sleep 2"), {"thinking": "I think it over.", "text": "ok"}]
    job = delegate_warm(daemon, "boxed", cwd=str(work), image=boxed, script=script, toolsets=["terminal"])
    wait_for(lambda: of_job(job["id"]), 60, what="the container started")
    pid = daemon.call("job", id=job["id"])["pid"]
    assert "HERMES_ZYGOTE=" in Path(f"/proc/{pid}/environ").read_text(errors="replace"), "not a warm child"
    assert daemon.wait_job(job["id"], timeout=60)["status"] == "completed"
    assert (work / "host.txt").read_text().strip() != socket.gethostname()
    assert "workspace" in (work / "root.txt").read_text().split()
    wait_for(lambda: not of_job(job["id"]), 30, what="the container removed")


@pytest.mark.slow
@needs_podman
def test_a_delegation_with_an_image_shares_its_directory_with_the_file_tools(make_daemon, tmp_path, boxed):
    daemon = make_daemon(CONFIG)
    work = tmp_path / "w"
    work.mkdir()
    script = [{"thinking": "I think it over.", "tool_calls": [{"name": "write_file",
                                                 "input": {"path": "/workspace/from_tools.txt", "content": "hello"}}]},
              terminal_step("cat from_tools.txt > seen.txt; echo inside > made_inside.txt"),
              {"thinking": "I think it over.", "tool_calls": [{"name": "read_file", "input": {"path": "made_inside.txt"}}]},
              {"thinking": "I think it over.", "text": "done"}]
    job = daemon.delegate("boxed", cwd=str(work), image=boxed, script=script, toolsets=["terminal", "file"])
    final = daemon.wait_job(job["id"])
    assert final["status"] == "completed", final
    assert [t["ok"] for t in final["trace"]] == [True, True, True]
    assert (work / "seen.txt").read_text() == "hello" and (work / "made_inside.txt").read_text() == "inside\n"
    wait_for(lambda: not of_job(job["id"]), 30, what="the container removed")
    # hermesctl delegate --image: the scripted default plan runs pwd inside
    result = daemon.ctl("--json", "delegate", "--image", boxed, "--toolsets", "terminal", "--cwd", str(work), "where")
    assert result.returncode == 0, result.stderr
    assert "/workspace" in json.loads(result.stdout)["summary"]
    assert labelled_under(ENGINE, daemon.home) == []


@needs_podman
def test_kill_commands_kills_inside_what_one_command_started_and_nothing_else(tmp_path, boxed):
    labels = {"hermes.job": "kill-test", "hermes.state_dir": str(tmp_path.resolve())}
    desc = {"engine": ENGINE, "kind": "podman", "workdir": "/workspace", "image": boxed, "labels": labels,
            "name": containers.container_name("kill-test", str(tmp_path))}
    with opened(desc, str(tmp_path)) as box:
        for run, seconds in (("run-1", 301), ("run-2", 302)):  # each left running by its command
            started = box.exec_argv(f"(sleep {seconds} &) > /dev/null 2>&1", run=run)
            subprocess.run(started, capture_output=True, check=True, timeout=30)
        box.kill_commands("run-1")
        ps = subprocess.run(box.exec_argv("ps"), capture_output=True, text=True, check=True, timeout=30).stdout
    assert "sleep 301" not in ps and "sleep 302" in ps and f"sleep {SLEEP_SECONDS}" in ps, ps


@needs_podman
def test_a_missing_image_fails_the_job_with_the_engines_message(make_daemon, boxed):
    daemon = make_daemon(CONFIG)
    job = daemon.delegate("boxed", image="localhost/hermes-no-such-image:latest", toolsets=["terminal"])
    final = daemon.wait_job(job["id"], timeout=60)
    assert final["status"] == "failed"
    assert "hermes-no-such-image" in final["error"] and "image not known" in final["error"]
    assert not of_job(job["id"])


@needs_podman
def test_cancel_removes_the_container(make_daemon, boxed):
    daemon = make_daemon(CONFIG)
    job = daemon.delegate("boxed", image=boxed, script=[terminal_step("sleep 60")], toolsets=["terminal"])
    wait_for(lambda: of_job(job["id"]), 30, what="the container started")
    daemon.call("cancel", id=job["id"])
    assert daemon.wait_job(job["id"], timeout=30)["status"] == "cancelled"
    wait_for(lambda: not of_job(job["id"]), 30, what="the container removed")


@pytest.mark.slow
@needs_podman
def test_after_kill_9_a_restarted_daemon_removes_its_containers_and_no_others(make_daemon, tmp_path, boxed):
    daemon = make_daemon(CONFIG)
    job = daemon.delegate("boxed", image=boxed, script=[terminal_step("sleep 60")], toolsets=["terminal"],
                          resume=False)
    wait_for(lambda: of_job(job["id"]), 30, what="the container started")
    other_dir = tmp_path / "another-daemon"
    labels = ["--label", f"hermes.state_dir={other_dir}", "--label", f"hermes.job={job['id']}"]
    other = subprocess.run([*ENGINE, "run", "-d", "--stop-signal", "KILL", *labels, "--network", "none",
                            *ulimit_args(4096), boxed, "sleep", "600"],
                           capture_output=True, text=True, check=True).stdout.strip()
    daemon.kill9()
    wait_for(lambda: not daemon.children(), 10, what="the child gone with the daemon")
    assert len(of_job(job["id"])) == 2  # nobody removed them: the child died with the daemon
    daemon.start()
    wait_for(lambda: of_job(job["id"]) == [other[:12]], 30, what="the sweep of the restarted daemon")
    assert daemon.call("job", id=job["id"])["status"] == "lost"
    wait_for(lambda: "removed 1 container(s) left by an earlier hermesd" in daemon.log(), 30,
             what="the sweep logged (after the engine's rm returned, which may be after the container is gone)")


@needs_podman
def test_the_daemon_removes_the_container_of_a_job_whose_child_was_killed(make_daemon, boxed):
    daemon = make_daemon(CONFIG)
    job = daemon.delegate("boxed", image=boxed, script=[terminal_step("sleep 60")], toolsets=["terminal"])
    wait_for(lambda: of_job(job["id"]), 30, what="the container started")
    os.kill(daemon.call("job", id=job["id"])["pid"], signal.SIGKILL)  # no finally runs in the child
    assert daemon.wait_job(job["id"], timeout=30)["status"] == "failed"
    wait_for(lambda: not of_job(job["id"]), 30, what="the container removed by the daemon")


@pytest.mark.slow
@needs_podman
def test_a_timed_out_command_is_killed_inside_and_timed_out_or_interrupted_jobs_lose_their_container(
        make_daemon, tmp_path, boxed):
    daemon = make_daemon(CONFIG)
    work = tmp_path / "w"
    work.mkdir()
    script = [{"thinking": "I think it over.", "tool_calls": [{"name": "terminal", "input": {"command": "sleep 50", "timeout": 1}}]},
              terminal_step("ps > ps.txt"), {"thinking": "I think it over.", "text": "done"}]
    job = daemon.delegate("boxed", cwd=str(work), image=boxed, script=script, toolsets=["terminal"])
    final = daemon.wait_job(job["id"], timeout=60)
    assert final["status"] == "completed" and [t["ok"] for t in final["trace"]] == [False, True]
    assert "sleep 50" not in (work / "ps.txt").read_text()  # only the container's own sleep and ps
    slow = daemon.delegate("slow", image=boxed, script=[terminal_step("sleep 60")], toolsets=["terminal"],
                           timeout_seconds=3)
    assert daemon.wait_job(slow["id"], timeout=60)["status"] == "timed_out"
    wait_for(lambda: not of_job(slow["id"]), 30, what="the timed-out job's container removed")
    busy = daemon.delegate("busy", image=boxed, script=[terminal_step("sleep 60")], toolsets=["terminal"],
                           background=True, resume=False)
    wait_for(lambda: of_job(busy["id"]), 30, what="the container started")
    assert daemon.stop() == 0
    assert not of_job(busy["id"])  # removed before the daemon exited
    assert daemon.start().call("job", id=busy["id"])["status"] == "interrupted"


@pytest.mark.slow
@needs_podman
def test_the_delegation_tools_image_boxes_the_subagent(make_daemon, boxed):
    daemon = make_daemon(CONFIG)
    script = [{"thinking": "I think it over.", "tool_calls": [{"name": "delegate_task",
                                                 "input": {"goal": "where am I", "image": boxed,
                                                           "toolsets": ["terminal"]}}]},
              {"thinking": "I think it over.", "text": "done"}]
    parent = daemon.delegate("parent", script=script, toolsets=["delegation", "terminal"])
    assert daemon.wait_job(parent["id"], timeout=60)["status"] == "completed"
    sub = [j for j in daemon.call("ps", all=True)["jobs"] if j["parent"] == parent["id"]]
    assert len(sub) == 1 and sub[0]["status"] == "completed" and "/workspace" in sub[0]["summary"]
    assert not of_job(sub[0]["id"])


@needs_podman
def test_git_inside_the_container_of_a_job_with_a_worktree_commits_on_the_jobs_branch(make_daemon, tmp_path, boxed,
                                                                                      git_image):
    repo = make_repo(tmp_path)
    daemon = make_daemon(CONFIG)
    command = ("pwd; git status --short --branch; echo boxed > made.txt && git add made.txt && "
               "git -c user.name=Box -c user.email=box@example.org commit -q -m 'made inside' && git log --format=%s")
    script = [terminal_step(command), {"thinking": "I think it over.", "text": "done"}]
    job = daemon.delegate("commit inside", cwd=str(repo / "src"), image=git_image, worktree=True, script=script,
                          toolsets=["terminal"])["id"]
    final = daemon.wait_job(job, timeout=60)
    assert final["status"] == "completed", final
    recorded = (daemon.home / "jobs" / job / "trajectory.json").read_text()
    assert "where the working directory is /workspace/src" in recorded  # what the model is told
    (output,) = [str(m["content"]) for m in json.loads(recorded)["messages"] if m["role"] == "tool"]
    assert output.splitlines()[:2] == ["/workspace/src", f"## hermes/{job}"], output
    assert "made inside\ninitial\n" in output, output
    branch = f"hermes/{job}"
    assert final["worktree"]["commit_count"] == 1 and final["worktree"]["changed_files"] == 0, final["worktree"]
    assert git(repo, "log", "--format=%s", branch).splitlines() == ["made inside", "initial"]
    assert git(repo, "show", f"{branch}:src/made.txt") == "boxed\n"
    assert git(repo, "log", "--format=%s", "main").splitlines() == ["initial"]  # the checkout untouched
    assert git(repo, "status", "--porcelain") == "" and not (repo / "src" / "made.txt").exists()
    wait_for(lambda: not of_job(job), 30, what="the container removed")
