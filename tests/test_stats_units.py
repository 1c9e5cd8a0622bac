"""tinyllm.stats.units: the sampling unit of each item (docs/definitions.md, "Units")."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm import stats
from tinyllm.stats import MIN_UNITS


def test_group_units_numbers_units_in_order_of_first_appearance():
    u = stats.group_units(["d2", "d1", "d2"])
    assert u.index.tolist() == [0, 1, 0]
    assert u.labels == ("d2", "d1")
    assert u.sizes.tolist() == [2, 1]
    assert (u.n_items, u.n_units, u.block_len, u.singletons) == (3, 2, None, False)


def test_integer_ids_in_any_order_take_the_same_numbering_as_any_hashable():
    ids = [7, 7, 3, 7, 3]
    by_array = stats.group_units(np.asarray(ids))
    by_list = stats.group_units(ids)
    by_tuple = stats.group_units([("doc", i) for i in ids])
    for u in (by_array, by_list, by_tuple):
        assert u.index.tolist() == [0, 0, 1, 0, 1]
        assert u.sizes.tolist() == [3, 2]
    assert by_array.labels == (7, 3) and by_list.labels == (7, 3)
    assert by_tuple.labels == (("doc", 7), ("doc", 3))


def test_sums_and_means_per_unit_by_hand():
    u = stats.group_units([0, 1, 0])
    assert u.sums([1.0, 2.0, 3.0]).tolist() == [4.0, 2.0]
    assert u.means([1.0, 2.0, 3.0]).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match=r"^items: expected one value per item \(3\), got shape"):
        u.sums([1.0, 2.0])


def test_index_is_read_only():
    u = stats.group_units([1, 2, 1])
    with pytest.raises(ValueError):
        u.index[0] = 1


@pytest.mark.parametrize(
    "ids, n_items, message",
    [
        ([0, 1, 2], 4, r"^units: expected one unit id per item \(4\), got 3$"),
        ([], None, r"^units: expected a unit id for each item, got none$"),
        ([0, None, 1], None, r"^units: expected a unit id for every item, got None at index 1$"),
        ([0.0, float("nan")], None, r"got nan at index 1$"),
        ([5, 5, 5], None, r"^units: expected at least 2 units .* got 1 unit \(5\) holding all 3"),
        (np.zeros(4, dtype=np.int64), None, r"expected at least 2 units"),
        (np.zeros((2, 2), dtype=np.int64), None, r"expected a 1-d array of unit ids"),
        ([[1], [2]], None, r"^units: expected hashable unit ids"),
    ],
)
def test_bad_unit_ids_are_refused_with_one_clear_line(ids, n_items, message):
    with pytest.raises(ValueError, match=message):
        stats.group_units(ids, n_items)


def test_fewer_than_ten_units_warn_and_ten_do_not():
    nine = stats.group_units(np.arange(9))
    assert (
        nine.warning == ("only 9 units: an interval over fewer than 10 units is unreliable")
        and MIN_UNITS == 10
    )
    assert stats.group_units(np.arange(10)).warning == ""
    assert stats.group_units(np.arange(10)).singletons


def test_contiguous_blocks_record_their_length_and_always_warn():
    u = stats.contiguous_blocks(7, 3)
    assert u.index.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert (u.block_len, u.n_units) == (3, 3)
    assert u.warning.startswith("no unit boundaries: 3 contiguous blocks of 3 items stand in")
    assert "only 3 units" in u.warning
    many = stats.contiguous_blocks(100, 5)
    assert many.warning == (
        "no unit boundaries: 20 contiguous blocks of 5 items stand in for the units"
    )
    with pytest.raises(ValueError, match=r"^blocks: expected at least 2 units .*1 block of 4"):
        stats.contiguous_blocks(4, 4)
    with pytest.raises(ValueError, match=r"^blocks: expected block_len an integer >= 1, got 0"):
        stats.contiguous_blocks(4, 0)


def test_units_from_lengths_skips_empty_units_and_keeps_their_positions():
    u = stats.units_from_lengths([2, 0, 3])
    assert u.index.tolist() == [0, 0, 1, 1, 1]
    assert u.labels == (0, 2)
    with pytest.raises(ValueError, match=r"^lengths: expected integer lengths >= 0, got -1 at"):
        stats.units_from_lengths([2, -1])
    with pytest.raises(ValueError, match=r"^lengths: expected at least 2 units"):
        stats.units_from_lengths([0, 4, 0])


def test_as_units_checks_the_item_count_of_given_units():
    u = stats.group_units([0, 0, 1])
    assert stats.as_units(u, 3) is u
    assert stats.as_units([0, 0, 1], 3).index.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match=r"expected units of 4 items .* got units of 3 items"):
        stats.as_units(u, 4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=2, max_size=30))
def test_grouping_is_a_relabelling_of_the_ids(ids):
    if len(set(ids)) < 2:
        with pytest.raises(ValueError):
            stats.group_units(ids)
        return
    u = stats.group_units(ids)
    # same id <-> same unit number, the labels give the ids back, first appearances in order
    assert [u.labels[g] for g in u.index] == ids
    firsts = [ids.index(label) for label in u.labels]
    assert firsts == sorted(firsts)
    assert u.sizes.sum() == len(ids)
    x = np.arange(len(ids), dtype=float)
    by_hand = [sum(x[i] for i in range(len(ids)) if ids[i] == label) for label in u.labels]
    assert u.sums(x).tolist() == by_hand
