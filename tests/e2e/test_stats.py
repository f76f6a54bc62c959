"""The e2e statistics: the spread (median, min-max) the pair statistics are built from."""

from sglang_mamba_dedup.e2e import stats as e2e_stats


def test_spread_median_of_odd_and_even_counts():
    assert e2e_stats.spread([]) is None and e2e_stats.spread([None]) is None
    assert e2e_stats.spread([3.0, 1.0, 2.0]) == {"runs": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert e2e_stats.spread([4.0, 1.0, 2.0, 3.0]) == {"runs": 4, "median": 2.5, "min": 1.0, "max": 4.0}
    assert e2e_stats.spread([5.0, None]) == {"runs": 1, "median": 5.0, "min": 5.0, "max": 5.0}
