"""A job's git worktree: the git commands, one definition for the child and the daemon.

A leaf (standard library only): the child imports it to create its worktree before
its agent starts and to say what it holds when the agent ends (:mod:`child.worktree`);
the daemon calls it in worker threads, never on its event loop
(:mod:`hermesd.worktrees.ops`), to remove a clean one and to list and prune them.

A job's worktree is described by a map (the job spec's ``worktree``, :func:`plan`):
``repo`` (the top level of the checkout the job's working directory is in), ``path``
(the new worktree), ``branch`` (``hermes/JOB_ID``, made from that checkout's ``HEAD``)
and ``cwd`` (the job's working directory inside it: the same path relative to the top
level).  ``git worktree add`` (https://git-scm.com/docs/git-worktree) makes it.

What counts as a change (:func:`inspect`): anything ``git status`` shows (modified,
staged, deleted or untracked files; ignored ones are not changes), and commits on the
branch that no other local branch has (``git rev-list BRANCH --not --branches`` but
itself): a branch merged into another one, or never committed to, has none.

The daemon is a child subreaper that reaps with ``waitpid(-1)``, which may take a git
command's exit status before :mod:`subprocess` does (then it reads 0).  So what is
decided here is decided on output git prints only on success: ``status --porcelain=v2
--branch`` always starts with ``# branch.`` lines, ``rev-list --count`` always prints a
number.  Removal is ``git worktree remove`` without ``--force``: git itself refuses a
worktree with changes, even one made since it was inspected.

Git does not make worktrees of one repository safely at once: ``worktree add`` reads every
other worktree's administrative files, and fails on one being made (``failed to read
.git/worktrees/NAME/commondir``); ``worktree prune`` could forget one being made.  So every
command here that adds, removes or prunes worktrees holds :func:`locked`, an exclusive
``flock(2)`` on ``.lock`` in the directory of the worktrees, across processes (the children of
parallel jobs, the daemon's worker thread).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

BRANCH_PREFIX = "hermes/"
"""A job's branch is ``hermes/JOB_ID``."""

GIT_TIMEOUT_SECONDS = 60.0
"""Longest wait for one git command."""

MAX_LISTED = 50
"""Most changed files and commits a report lists (``changed_files``/``commits`` count them all)."""


class GitError(Exception):
    """A git command failed, timed out or could not run (the message says which and why)."""


class NotARepository(GitError):
    """The directory is in no git repository (or git is not installed): no worktree can be made."""


def top_level(directory: str) -> Path | None:
    """The top level of the git checkout ``directory`` is in: the nearest directory, from
    ``directory`` (symbolic links resolved) up, holding a ``.git`` (a directory, or the file of
    a linked worktree or submodule), as git's own discovery finds it; None when there is none.
    Only ``stat`` calls: cheap enough for the daemon's loop."""
    here = Path(os.path.realpath(directory))
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def git_installed(env: dict[str, str] | None = None) -> bool:
    """Whether a ``git`` executable is on ``PATH`` (of ``env``, else this process's)."""
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    return any(os.access(os.path.join(d, "git"), os.X_OK) for d in search.split(os.pathsep) if d)


def plan(directory: str, job: str, root: Path) -> dict[str, str]:
    """The worktree of job ``job`` started in ``directory``: ``{repo, path, branch, cwd}`` (see
    the module doc), the worktree at ``root/JOB``.  Raises :class:`NotARepository` naming the
    directory when it is in no git checkout or git is not installed."""
    top = top_level(directory)
    if top is None:
        raise NotARepository(f"{directory} is not in a git repository (no .git in it or above it)")
    if not git_installed():
        raise NotARepository("git is not installed (no git on PATH); install it (Debian: apt-get install git)")
    path = root / job
    inside = os.path.relpath(os.path.realpath(directory), top)
    return {"repo": str(top), "path": str(path), "branch": BRANCH_PREFIX + job,
            "cwd": str(path if inside == "." else path / inside)}


def linked_layout(top: str) -> dict[str, str]:
    """Where git keeps the files of the linked worktree whose top level is ``top``, as those files
    name them (read, no git runs; https://git-scm.com/docs/gitrepository-layout): ``gitdir`` (what
    ``top/.git``, a file, names: ``REPO/.git/worktrees/ID``), ``common`` (the repository's git
    directory, which that one's ``commondir`` names, relative to it) and ``worktree`` (the
    worktree, as that one's ``gitdir`` file names it, ``…/.git`` stripped).  Absolute paths, not
    resolved: git inside a container finds them where a mount at the same path puts them.
    Raises :class:`GitError` when ``top/.git`` is no such file, names a relative path (git's
    ``worktree.useRelativePaths``: it would be resolved from the mount point inside), or a file
    it leads to cannot be read."""
    dot_git = os.path.join(top, ".git")
    try:
        with open(dot_git, encoding="utf-8") as fh:
            named = fh.read().strip()
        if not named.startswith("gitdir: "):
            raise GitError(f"{dot_git} does not name a git directory (gitdir: …)")
        gitdir = os.path.normpath(named[len("gitdir: "):])
        if not os.path.isabs(gitdir):
            raise GitError(f"{dot_git} names its git directory by a relative path ({gitdir}; git's "
                           "worktree.useRelativePaths), which a container cannot resolve")
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as fh:
            common = os.path.normpath(os.path.join(gitdir, fh.read().strip()))
        with open(os.path.join(gitdir, "gitdir"), encoding="utf-8") as fh:
            back = os.path.normpath(os.path.join(gitdir, fh.read().strip()))
    except (IsADirectoryError, NotADirectoryError):
        raise GitError(f"{dot_git} is not the file of a linked worktree") from None
    except OSError as exc:
        raise GitError(f"cannot read the git files of the worktree {top}: {exc.strerror}: {exc.filename}") from None
    return {"gitdir": gitdir, "common": common, "worktree": os.path.dirname(back)}


def git(args: list[str], cwd: str, env: dict[str, str] | None = None) -> str:
    """Run ``git ARGS`` in ``cwd``; its standard output.  Raises :class:`GitError` with its
    standard error when it exits non-zero, times out or cannot run (a zero status may have been
    reaped by the daemon: callers decide on the output, see the module doc)."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} in {cwd} did not finish within {GIT_TIMEOUT_SECONDS:g}s") from None
    except OSError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc}") from None
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} in {cwd}: {(done.stderr.strip() or 'failed')[-500:]}")
    return done.stdout


@contextlib.contextmanager
def locked(worktree: dict[str, Any]) -> Iterator[None]:
    """Hold the exclusive lock of the directory the worktree is made in (see the module doc);
    the lock file is created 0600 beside the worktrees."""
    folder = Path(worktree["path"]).parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def branch_exists(worktree: dict[str, Any], env: dict[str, str] | None = None) -> bool:
    """Whether the worktree's branch exists in its repository."""
    ref = f"refs/heads/{worktree['branch']}"
    return bool(git(["for-each-ref", "--format=%(refname)", ref], worktree["repo"], env).strip())


def has_commit(repo: str, env: dict[str, str] | None = None) -> bool:
    """Whether ``HEAD`` of ``repo`` names a commit (a repository just made by ``git init`` has
    none: its branch is unborn).  Decided on what git prints (see the module doc)."""
    try:
        return bool(git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repo, env).strip())
    except GitError:
        return False


def create(worktree: dict[str, Any], env: dict[str, str] | None = None) -> bool:
    """Make the worktree of ``worktree`` (:func:`plan`) unless it is there already (a resumed
    job keeps its own); returns True when it was made now.  Its branch is made from the
    repository checkout's ``HEAD``, or taken as it is when it exists (its worktree was deleted
    by hand).  The job's working directory in it is made when git has none (an empty or
    untracked directory of the checkout).  Raises :class:`GitError`."""
    path, made = Path(worktree["path"]), False
    if not (path / ".git").exists():
        repo = worktree["repo"]
        with locked(worktree):
            if branch_exists(worktree, env):
                git(["worktree", "prune"], repo, env)  # forget a worktree deleted by hand, which holds the branch
                git(["worktree", "add", "--quiet", str(path), worktree["branch"]], repo, env)
            else:
                if not has_commit(repo, env):
                    raise GitError(f"{repo} has no commit yet: a job's worktree is made from HEAD "
                                   "(commit once, or leave --worktree off)")
                git(["worktree", "add", "--quiet", "-b", worktree["branch"], str(path), "HEAD"], repo, env)
        path.chmod(0o700)  # git made it with the tools' umask; its files stay as the checkout's are
        made = True
    Path(worktree["cwd"]).mkdir(parents=True, exist_ok=True)
    return made


def inspect(worktree: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """What the worktree holds: ``{made, changed, changed_files, changes, commit_count, commits}``:
    ``changes`` the first :data:`MAX_LISTED` of ``git status``'s entries (``"? new.txt"``,
    ``"M src/a.py"``), ``commits`` the first of the branch's own commits, newest first
    (``{id, subject}``), ``changed`` whether there is any of either.  A worktree gone from disk
    holds its branch's commits only; ``made`` is False when neither it nor its branch exists (the
    job ended before making them).  Raises :class:`GitError` (also for output that is not
    git's: see the module doc)."""
    path, branch = worktree["path"], worktree["branch"]
    changes: list[str] = []
    if os.path.isdir(path):
        out = git(["status", "--porcelain=v2", "--branch", "--untracked-files=all"], path, env)
        if not out.startswith("# branch."):
            raise GitError(f"git status in {path} printed no status")
        changes = [_entry(line) for line in out.splitlines() if line and not line.startswith("#")]
    commits: list[dict[str, str]] = []
    count = 0
    branched = branch_exists(worktree, env)
    if branched:
        own = [branch, "--not", f"--exclude={branch}", "--branches"]
        counted = git(["rev-list", "--count", *own], worktree["repo"], env).strip()
        if not counted.isdigit():
            raise GitError(f"git rev-list in {worktree['repo']} printed no count")
        count = int(counted)
        if count:
            log = git(["log", f"--max-count={MAX_LISTED}", "--format=%H%x1f%s", *own, "--"], worktree["repo"], env)
            commits = [dict(zip(("id", "subject"), line.split("\x1f", 1))) for line in log.splitlines() if line]
    return {"made": branched or os.path.isdir(path), "changed": bool(changes or count), "changed_files": len(changes),
            "changes": changes[:MAX_LISTED], "commit_count": count, "commits": commits}


def _entry(line: str) -> str:
    """One ``status --porcelain=v2`` entry as ``XY path``: ``? path`` (untracked), ``M path``,
    ``R new`` (renamed: the new path), ``U path`` (unmerged)."""
    kind, _, rest = line.partition(" ")
    if kind in ("?", "!"):
        return f"{kind} {rest}"
    fields = rest.split(" ", {"1": 7, "2": 8, "u": 9}.get(kind, 0))
    xy = fields[0].replace(".", "") if fields else ""
    name = fields[-1].split("\t", 1)[0] if fields else rest
    return f"{xy or kind} {name}"


def remove(worktree: dict[str, Any], env: dict[str, str] | None = None) -> None:
    """Remove a worktree without changes and its branch (nothing of the model's work is lost:
    git refuses a worktree with changes, and a branch with commits of its own is kept).  A worktree
    already gone from disk is forgotten (``git worktree prune``).  Raises :class:`GitError`."""
    repo, path = worktree["repo"], worktree["path"]
    with locked(worktree):
        if os.path.isdir(path):
            git(["worktree", "remove", path], repo, env)
            if os.path.isdir(path):
                raise GitError(f"git worktree remove left {path} in place")
        else:
            git(["worktree", "prune"], repo, env)
        if branch_exists(worktree, env) and inspect(worktree, env)["commit_count"] == 0:
            git(["branch", "--quiet", "-D", worktree["branch"]], repo, env)
