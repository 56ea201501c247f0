"""A local test image and container clean-up, for tests and bench (podman, ``--runtime runc``).

The image ``localhost/hermes-test-busybox:latest`` is made here, offline: a
root filesystem holding Debian's ``busybox-static`` binary with a symbolic link
per applet (``/bin/sh``, ``hostname``, ``ls``, ``sleep``…), packed into a tar
archive and loaded with ``podman import``.  ``localhost/hermes-test-git:1`` is
the same with Debian's ``/usr/bin/git`` and the shared libraries ``ldd`` names
for it, at their paths (:func:`ensure_git_image`).  Each is made once per
machine (kept in podman's storage), checked with ``podman image exists``; a
change of what an image holds takes a new tag, so that a machine's old one is
not used.

:func:`remove_under` removes every container whose ``hermes.state_dir`` label
lies under a directory: a test's own containers and never another's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

IMAGE = "localhost/hermes-test-busybox:latest"
GIT_IMAGE = "localhost/hermes-test-git:1"
GIT = "/usr/bin/git"
RUNTIME = "runc"
"""crun fails on kernels with hybrid cgroups (v1 and v2 mounted together): runc works."""

BUSYBOX = "/bin/busybox"
APT_HINT = "apt-get install -y podman runc busybox-static"


def podman() -> list[str] | None:
    """``["/usr/bin/podman", "--runtime", "runc"]``, or None when podman, runc or busybox-static is missing."""
    path, runc = shutil.which("podman"), shutil.which(RUNTIME) or shutil.which("runc", path="/usr/sbin")
    if not path or not runc or not _static_busybox():
        return None
    return [path, "--runtime", RUNTIME]


def _static_busybox() -> bool:
    """True when :data:`BUSYBOX` has no program interpreter (a dynamic ELF names ``ld-linux`` early on)."""
    try:
        with open(BUSYBOX, "rb") as fh:
            return b"ld-linux" not in fh.read(4096)
    except OSError:
        return False


def ensure_image(engine: list[str], work: Path, name: str = IMAGE, files: dict[str, str] | None = None) -> str:
    """Import image ``name`` unless podman has it; returns its name.  ``work``: a scratch directory;
    ``files``: what the image holds besides busybox, ``{path inside: host file}`` (a symbolic
    link is followed)."""
    if subprocess.run([*engine, "image", "exists", name], capture_output=True).returncode == 0:
        return name
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    archive = work / "rootfs.tar"
    folders = {"bin", "tmp", "etc", "proc", "sys", "dev", "workspace"}
    files = files or {}
    for path in files:
        parts = Path(path).relative_to("/").parent.parts
        folders |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    with tarfile.open(archive, "w") as tar:
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, "bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        for path, source in files.items():
            tar.add(os.path.realpath(source), path.lstrip("/"))
    subprocess.run([*engine, "import", "--change", "ENV=PATH=/bin", str(archive), name], check=True,
                   capture_output=True)
    return name


def git_files() -> dict[str, str] | None:
    """What :data:`GIT_IMAGE` holds besides busybox (``{path inside: host file}``): :data:`GIT` as
    ``/bin/git`` (on the image's ``PATH``) and in git's exec path (``/usr/lib/git-core/git``, where
    git finds itself to run a command of its own, e.g. ``gc --auto`` after a commit), and the shared
    libraries it loads at their paths (``ldd``: the libraries and the program interpreter); None when
    git or ldd is not installed."""
    if not os.access(GIT, os.X_OK) or not shutil.which("ldd"):
        return None
    listed = subprocess.run(["ldd", GIT], capture_output=True, text=True).stdout
    libraries = re.findall(r"(?:=> )?(/\S+) \(0x", listed)
    if not libraries:
        return None
    return {"/bin/git": GIT, "/usr/lib/git-core/git": GIT, **{path: path for path in libraries}}


def ensure_git_image(engine: list[str], work: Path) -> str:
    """:data:`GIT_IMAGE` (:func:`ensure_image` with :func:`git_files`) unless podman has it; returns its
    name.  Raises ``RuntimeError`` when git or ldd is missing."""
    files = git_files()
    if files is None:
        raise RuntimeError(f"{GIT} and ldd are needed for {GIT_IMAGE}: apt-get install git")
    return ensure_image(engine, work, GIT_IMAGE, files)


def labelled_under(engine: list[str], root: Path) -> list[str]:
    """Ids of the containers whose ``hermes.state_dir`` label is ``root`` or below it."""
    ids = subprocess.run([*engine, "ps", "-aq", "--no-trunc", "--filter", "label=hermes.state_dir"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return []
    out = subprocess.run([*engine, "inspect", "--format", '{{.Id}} {{index .Config.Labels "hermes.state_dir"}}', *ids],
                         capture_output=True, text=True).stdout
    prefix = str(root.resolve())
    return [cid for cid, _, where in (line.partition(" ") for line in out.splitlines())
            if where == prefix or where.startswith(prefix + "/")]


def remove_under(engine: list[str], root: Path) -> list[str]:
    """Remove (``rm -f``) the containers of :func:`labelled_under`; returns their ids."""
    ids = labelled_under(engine, root)
    if ids:
        subprocess.run([*engine, "rm", "-f", "-t", "0", *ids], capture_output=True)
    return ids


def runc_orphans(engine: list[str]) -> set[str]:
    """Ids of containers runc runs that podman no longer lists: what a podman command killed
    half-way can leave (invisible to any removal by label)."""
    running = subprocess.run([RUNTIME, "list", "-q"], capture_output=True, text=True).stdout.split()
    known = subprocess.run([*engine, "ps", "-aq", "--no-trunc"], capture_output=True, text=True).stdout.split()
    return set(running) - set(known)


def kill_orphans(ids: set[str]) -> None:
    """End containers of :func:`runc_orphans` (``runc kill`` then ``runc delete --force``)."""
    for cid in ids:
        subprocess.run([RUNTIME, "kill", cid, "KILL"], capture_output=True)
        subprocess.run([RUNTIME, "delete", "--force", cid], capture_output=True)
