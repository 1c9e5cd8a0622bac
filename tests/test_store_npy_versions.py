"""The .npy versions and dtypes the store reads back (tinyllm/store/documents.py, load_npy):
format 1.0 and 2.0 load, 3.0 and object arrays are refused with their messages word for word."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tinyllm.store import StoreUnreadableError
from tinyllm.store.documents import load_npy

SCORES = np.array([0.25, 1.5, -3.0])


def npy(a: np.ndarray, version: tuple[int, int] | None, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=version, allow_pickle=allow_pickle)
    return buf.getvalue()


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_format_1_0_and_2_0_load(version):
    data = npy(SCORES, version)
    assert data[6:8] == bytes(version)
    got = load_npy("items/x.npy", data)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, SCORES)


def test_format_3_0_is_refused_naming_the_version():
    with pytest.raises(StoreUnreadableError) as e:
        load_npy("items/x.npy", npy(SCORES, (3, 0)))
    assert str(e.value) == (
        "items/x.npy: malformed items: expected a .npy array, got expected .npy format "
        "version 1.0 or 2.0, got (3, 0)"
    )


def test_an_object_array_is_refused_before_anything_is_unpickled():
    data = npy(np.array([1.0, None], dtype=object), (1, 0), allow_pickle=True)
    with pytest.raises(StoreUnreadableError) as e:
        load_npy("items/x.npy", data)
    assert str(e.value) == (
        "items/x.npy: malformed items: expected a .npy array of numbers, got dtype object "
        "(object arrays are pickles; allow_pickle=False never loads them)"
    )
