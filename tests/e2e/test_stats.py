"""The e2e throughput statistics: spreads, the off/on comparison, the table and the run schedule."""

from sglang_mamba_dedup.e2e import stats as e2e_stats


def test_spread_median_of_odd_and_even_counts():
    assert e2e_stats.spread([]) is None and e2e_stats.spread([None]) is None
    assert e2e_stats.spread([3.0, 1.0, 2.0]) == {"runs": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert e2e_stats.spread([4.0, 1.0, 2.0, 3.0]) == {"runs": 4, "median": 2.5, "min": 1.0, "max": 4.0}
    assert e2e_stats.spread([5.0, None]) == {"runs": 1, "median": 5.0, "min": 5.0, "max": 5.0}


def test_compare_spreads_within_noise_faster_and_too_few():
    off = e2e_stats.spread([100.0, 104.0, 102.0])
    on = e2e_stats.spread([103.0, 106.0, 105.0])
    c = e2e_stats.compare_spreads(off, on)
    assert c["verdict"] == "within noise" and c["overlap"] is True
    assert c["text"].startswith("within noise") and "+2.9%" in c["text"]
    faster = e2e_stats.compare_spreads(off, e2e_stats.spread([110.0, 112.0, 111.0]))
    assert faster["verdict"] == "on faster" and faster["overlap"] is False
    assert "median 8.8% above off" in faster["text"]
    slower = e2e_stats.compare_spreads(off, e2e_stats.spread([90.0, 91.0, 92.0, 93.0]))
    assert slower["verdict"] == "off faster" and "median 11.5% above on" in slower["text"]
    touching = e2e_stats.compare_spreads(off, e2e_stats.spread([104.0, 106.0, 108.0]))
    assert touching["verdict"] == "within noise"  # ranges that touch overlap
    few = e2e_stats.compare_spreads(e2e_stats.spread([1.0, 2.0]), on)
    assert few["verdict"] == "not compared" and "2 off / 3 on runs (3 per mode needed)" in few["text"]
    assert e2e_stats.compare_spreads(None, on)["verdict"] == "not compared"


def test_throughput_stats_and_table():
    samples = [("off", {"batch1": 10.0, "full": 100.0}), ("on", {"batch1": 12.0, "full": 101.0})] * 3
    samples.append(("on", {"batch1": None, "full": 99.0}))
    stats = e2e_stats.throughput_stats(samples)
    assert stats["batch1"]["on"]["runs"] == 3 and stats["full"]["on"]["runs"] == 4
    assert stats["batch1"]["comparison"]["verdict"] == "on faster"
    assert stats["full"]["comparison"]["verdict"] == "within noise"
    table = e2e_stats.throughput_table(stats, {"batch1": "batch 1", "full": "full"})
    assert table[0].startswith("| phase |") and len(table) == 4
    assert (
        "| batch 1 | 10.0 (10.0 - 10.0, 3 runs) | 12.0 (12.0 - 12.0, 3 runs) | on faster: median 20.0% above off"
        in table[2]
    )
    assert "ratio" not in "\n".join(table)


def test_run_schedule():
    assert e2e_stats.run_schedule(None) == [("off", False), ("on", False)]
    assert e2e_stats.run_schedule(["off", "on", "off"]) == [("off", False), ("on", False), ("off", False)]
    assert e2e_stats.run_schedule(None, 2) == [
        ("off", True),
        ("off", False),
        ("on", False),
        ("off", False),
        ("on", False),
    ]
    assert e2e_stats.run_schedule(None, 1, throwaway=False) == [("off", False), ("on", False)]
