"""The file toolset on real files: reading, writing, patching and listing inside
the working directory; escapes (``..``, absolute paths, symlinks) and size caps refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from child.tools.registry import ToolContext, execute


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return root


def ctx_for(root: Path, **limits) -> ToolContext:
    return ToolContext(cwd=str(root), limits=limits)


def test_write_then_read_round_trip_creates_parents(work):
    ctx = ctx_for(work)
    wrote = execute("write_file", {"path": "src/pkg/mod.py", "content": "a = 1\nb = 2\n"}, ctx)
    assert wrote.ok and wrote.content == "wrote 12 bytes to src/pkg/mod.py"
    assert (work / "src/pkg/mod.py").read_text() == "a = 1\nb = 2\n"
    assert execute("read_file", {"path": "src/pkg/mod.py"}, ctx).content == "a = 1\nb = 2\n"


def test_read_with_offset_and_limit(work):
    (work / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = execute("read_file", {"path": "f.txt", "offset": 3, "limit": 2}, ctx_for(work))
    assert result.ok
    assert result.content == "line 3\nline 4\n\n[lines 3-4 of 10]"
    past = execute("read_file", {"path": "f.txt", "offset": 11}, ctx_for(work))
    assert not past.ok and "past the end" in past.content


def test_absolute_path_inside_the_working_directory_is_fine(work):
    (work / "a.txt").write_text("hi")
    assert execute("read_file", {"path": str(work / "a.txt")}, ctx_for(work)).content == "hi"


@pytest.mark.parametrize("tool,args", [
    ("read_file", {"path": "../outside/secret.txt"}),
    ("read_file", {"path": "/etc/hostname"}),
    ("write_file", {"path": "../outside/new.txt", "content": "x"}),
    ("write_file", {"path": "sub/../../outside/new.txt", "content": "x"}),
    ("patch_file", {"path": "../outside/secret.txt", "old": "secret", "new": "public"}),
    ("list_files", {"path": ".."}),
])
def test_paths_outside_the_working_directory_are_refused(work, tool, args):
    result = execute(tool, args, ctx_for(work))
    assert not result.ok
    assert "outside the working directory" in result.content
    assert not (work.parent / "outside" / "new.txt").exists()
    assert (work.parent / "outside" / "secret.txt").read_text() == "secret\n"


def test_symlinks_pointing_out_are_refused(work):
    outside = work.parent / "outside"
    os.symlink(outside / "secret.txt", work / "link.txt")
    os.symlink(outside, work / "linkdir")
    os.symlink(outside / "not-yet.txt", work / "dangling.txt")
    ctx = ctx_for(work)
    for tool, args in [("read_file", {"path": "link.txt"}),
                       ("read_file", {"path": "linkdir/secret.txt"}),
                       ("write_file", {"path": "linkdir/new.txt", "content": "x"}),
                       ("write_file", {"path": "dangling.txt", "content": "x"}),
                       ("list_files", {"path": "linkdir"})]:
        result = execute(tool, args, ctx)
        assert not result.ok and "outside the working directory" in result.content, (tool, args)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_symlink_inside_the_working_directory_is_followed(work):
    (work / "real.txt").write_text("real")
    os.symlink(work / "real.txt", work / "alias.txt")
    assert execute("read_file", {"path": "alias.txt"}, ctx_for(work)).content == "real"


def test_size_caps_on_read_and_write(work):
    ctx = ctx_for(work, max_file_bytes=100)
    (work / "big.txt").write_text("x" * 101)
    read = execute("read_file", {"path": "big.txt"}, ctx)
    assert not read.ok and "101 bytes is larger than the limit of 100 bytes" in read.content
    write = execute("write_file", {"path": "new.txt", "content": "y" * 101}, ctx)
    assert not write.ok and "max_file_bytes" in write.content
    assert not (work / "new.txt").exists()
    assert execute("write_file", {"path": "new.txt", "content": "y" * 100}, ctx).ok


def test_read_output_is_capped(work):
    (work / "long.txt").write_text("z" * 5000)
    result = execute("read_file", {"path": "long.txt"}, ctx_for(work, max_output_bytes=1000))
    assert result.ok and "[output truncated: 4000 bytes omitted]" in result.content


def test_patch_replaces_one_exact_match(work):
    (work / "m.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    result = execute("patch_file", {"path": "m.py", "old": "    return 2\n", "new": "    return 3\n"}, ctx_for(work))
    assert result.ok and result.content == "patched m.py: replaced lines 5-6"
    assert (work / "m.py").read_text().endswith("return 3\n")


def test_patch_ambiguous_or_missing_text_is_an_error(work):
    (work / "m.py").write_text("x = 1\nx = 1\n")
    ctx = ctx_for(work)
    ambiguous = execute("patch_file", {"path": "m.py", "old": "x = 1", "new": "x = 2"}, ctx)
    assert not ambiguous.ok and "occurs 2 times" in ambiguous.content
    missing = execute("patch_file", {"path": "m.py", "old": "y = 1", "new": "y = 2"}, ctx)
    assert not missing.ok and "not found" in missing.content
    assert (work / "m.py").read_text() == "x = 1\nx = 1\n"


def test_missing_binary_and_directory_errors(work):
    ctx = ctx_for(work)
    (work / "bin.dat").write_bytes(b"\x00\x01\x02")
    (work / "d").mkdir()
    assert "does not exist" in execute("read_file", {"path": "nope.txt"}, ctx).content
    assert "binary" in execute("read_file", {"path": "bin.dat"}, ctx).content
    assert "is a directory" in execute("read_file", {"path": "d"}, ctx).content
    assert "is a directory" in execute("write_file", {"path": "d", "content": ""}, ctx).content


def test_list_files_directory_and_glob(work):
    (work / "pkg" / "sub").mkdir(parents=True)
    for name in ("a.py", "pkg/b.py", "pkg/sub/c.py", "pkg/readme.md"):
        (work / name).write_text("")
    os.symlink(work.parent / "outside", work / "out")  # listed, never walked
    ctx = ctx_for(work)
    assert execute("list_files", {}, ctx).content.splitlines() == ["a.py", "out", "pkg/"]
    assert execute("list_files", {"path": "pkg"}, ctx).content.splitlines() == ["pkg/b.py", "pkg/readme.md", "pkg/sub/"]
    assert execute("list_files", {"glob": "*.py"}, ctx).content.splitlines() == ["a.py", "pkg/b.py", "pkg/sub/c.py"]
    assert execute("list_files", {"glob": "*.txt"}, ctx).content == "(no files match)"
