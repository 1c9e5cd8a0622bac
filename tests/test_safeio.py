"""tinyllm.safeio: writes never land outside their target, reads never hang or over-allocate."""

from __future__ import annotations

import os
import stat
import threading

import pytest
import yaml
from fs_helpers import chardev

from tinyllm import safeio
from tinyllm.safeio import UnsafePathError


def _bomb(levels: int, width: int = 9) -> str:
    lines = ["l0: &l0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


# ---- writing -----------------------------------------------------------------------------------


def test_write_atomic_writes_a_regular_file_and_leaves_no_temp(tmp_path):
    p = safeio.write_atomic(tmp_path / "new" / "out.json", b'{"a": 1}')
    assert p.read_bytes() == b'{"a": 1}'
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    safeio.write_atomic(p, lambda f: f.write(b"second"))
    assert p.read_bytes() == b"second"
    assert sorted(os.listdir(p.parent)) == ["out.json"]


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: os.symlink(p.parent / "victim", p), "a symbolic link"),
        (lambda p: os.mkfifo(p), "a FIFO"),
        (chardev, "a character device"),
        (lambda p: p.mkdir(), "a folder"),
    ],
)
def test_write_atomic_refuses_a_special_target_and_leaves_it(tmp_path, make, kind):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    target = tmp_path / "out"
    make(target)
    before = os.lstat(target)
    with pytest.raises(UnsafePathError) as e:
        safeio.write_atomic(target, b"x", what="--out")
    assert str(e.value) == f"--out {target}: expected a regular file or a new path, got {kind}"
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert victim.read_bytes() == b"keep me"
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_write_atomic_never_follows_a_planted_fixed_temp_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    os.symlink(victim, tmp_path / "report.json.tmp")  # what a fixed-name writer would follow
    p = safeio.write_atomic(tmp_path / "report.json", b"new")
    assert p.read_bytes() == b"new" and not p.is_symlink()
    assert victim.read_bytes() == b"keep me"


def test_write_atomic_refuses_a_parent_that_is_a_file(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(
        UnsafePathError, match=r"expected its parent .*/f to be a folder, got a regular file"
    ):
        safeio.write_atomic(tmp_path / "f" / "out", b"x")


def test_write_atomic_failure_keeps_the_old_file(tmp_path):
    p = tmp_path / "out"
    p.write_bytes(b"old")

    def half(f):
        f.write(b"half")
        raise RuntimeError("serialisation failed")

    with pytest.raises(RuntimeError, match="serialisation failed"):
        safeio.write_atomic(p, half)
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out"]


def test_write_under_refuses_a_symlinked_folder_and_writes_nothing_through_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "site"
    root.mkdir()
    os.symlink(elsewhere, root / "release")
    with pytest.raises(UnsafePathError) as e:
        safeio.write_under(root, "release/v1.html", b"<html>")
    assert str(e.value) == f"{root / 'release'}: expected a folder, got a symbolic link"
    assert os.listdir(elsewhere) == []


def test_write_under_refuses_a_root_that_is_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "root")
    with pytest.raises(UnsafePathError, match="expected a folder, got a symbolic link"):
        safeio.write_under(tmp_path / "root", "a.html", b"x")
    assert os.listdir(tmp_path / "real") == []


def test_write_under_makes_the_folders(tmp_path):
    p = safeio.write_under(tmp_path / "out", "release/v1/index.html", b"x")
    assert p == tmp_path / "out" / "release" / "v1" / "index.html"
    assert p.read_bytes() == b"x"


@pytest.mark.parametrize("rel", ["../x", "a//b", "./a", "a/..", ""])
def test_write_under_refuses_paths_that_climb(tmp_path, rel):
    with pytest.raises(UnsafePathError, match="expected a relative path of plain names"):
        safeio.write_under(tmp_path, rel, b"x")


# ---- reading -----------------------------------------------------------------------------------


def test_read_regular_reads_a_file_and_follows_a_link_to_one(tmp_path):
    (tmp_path / "a").write_bytes(b"12345")
    os.symlink(tmp_path / "a", tmp_path / "l")
    assert safeio.read_regular(tmp_path / "a", max_bytes=5) == b"12345"
    assert safeio.read_regular(tmp_path / "l", max_bytes=5) == b"12345"


def test_read_regular_refuses_a_larger_file_before_reading(tmp_path):
    (tmp_path / "a").write_bytes(b"123456")
    with pytest.raises(UnsafePathError) as e:
        safeio.read_regular(tmp_path / "a", max_bytes=5, what="report")
    assert str(e.value) == f"report {tmp_path / 'a'}: expected at most 5 bytes, got 6"


def test_read_regular_refuses_a_fifo_at_once(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    done = []

    def read():
        try:
            safeio.read_regular(fifo, max_bytes=100)
        except UnsafePathError as e:
            done.append(str(e))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader so the test process can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert done == [f"file {fifo}: expected a regular file, got a FIFO"]


def test_read_regular_refuses_devices_and_folders(tmp_path):
    chardev(tmp_path / "zero")
    with pytest.raises(UnsafePathError, match="expected a regular file, got a character device"):
        safeio.read_regular(tmp_path / "zero", max_bytes=100)
    with pytest.raises(UnsafePathError, match="expected a regular file, got a folder"):
        safeio.read_regular(tmp_path, max_bytes=100)


def test_read_regular_missing_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        safeio.read_regular(tmp_path / "nope", max_bytes=1)


# ---- YAML --------------------------------------------------------------------------------------


def test_load_yaml_matches_safe_load_on_ordinary_documents():
    text = "a: &x [1, 2]\nb: *x\nc: {d: 'e'}\n"
    assert safeio.load_yaml(text, "m.yaml") == yaml.safe_load(text)
    assert safeio.load_yaml("", "m.yaml") is None


def test_load_yaml_counts_expanded_nodes_exactly():
    # l0: 1 seq + 3 scalars; l1: 1 seq + 3 copies of l0 (4 each); plus the mapping and 2 keys
    text = _bomb(2, width=3)
    expanded = 1 + 2 + (1 + 3) + (1 + 3 * 4)
    assert safeio.load_yaml(text, "m", max_nodes=expanded) == yaml.safe_load(text)
    with pytest.raises(UnsafePathError):
        safeio.load_yaml(text, "m", max_nodes=expanded - 1)


def test_load_yaml_refuses_an_alias_bomb():
    with pytest.raises(UnsafePathError) as e:
        safeio.load_yaml(_bomb(9), "manifest.yaml")
    assert str(e.value).startswith(
        "manifest.yaml: expected a YAML document of at most 1000000 nodes with its aliases "
        "expanded, got more"
    )


def test_load_yaml_refuses_a_recursive_alias():
    with pytest.raises(UnsafePathError, match="recursive alias"):
        safeio.load_yaml("a: &x [*x]\n", "m.yaml", max_nodes=1000)


def test_load_yaml_uses_the_given_loader():
    class Tagged(yaml.SafeLoader):
        pass

    Tagged.add_constructor("!function", lambda loader, node: ("fn", loader.construct_scalar(node)))
    assert safeio.load_yaml("f: !function utils.x\n", "t.yaml", loader=Tagged) == {
        "f": ("fn", "utils.x")
    }
