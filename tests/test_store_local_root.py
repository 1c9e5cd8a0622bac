"""A local store's root must be a folder (tinyllm/store/local.py, LocalStore): a file there is
refused with its path."""

from __future__ import annotations

import pytest

from tinyllm.store import LocalStore, StoreError


def test_a_file_as_the_root_is_refused_naming_it(tmp_path):
    f = tmp_path / "store.txt"
    f.write_text("not a folder")
    with pytest.raises(StoreError) as e:
        LocalStore(f)
    assert str(e.value) == f"store: expected a folder, got the file {f}"
    assert LocalStore(tmp_path / "new").root == tmp_path / "new"  # a missing folder is fine
