"""``benchmarks/cpu_clock.py``: the machine's busy and steal seconds from ``/proc/stat``,
parsed from constructed files, and the CPU figures ``bench_pretrain.py`` derives from them."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_pretrain  # noqa: E402
import cpu_clock  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def _stat(tmp_path, user, nice, system, idle, iowait, irq, softirq, steal):
    p = tmp_path / "stat"
    fields = [user, nice, system, idle, iowait, irq, softirq, steal, 0, 0]
    p.write_text("cpu  " + " ".join(str(f * HZ) for f in fields) + "\ncpu0 1 2 3\n")
    return str(p)


def test_busy_counts_work_and_leaves_out_idle_iowait_and_steal(tmp_path):
    s = cpu_clock.read(_stat(tmp_path, 10, 1, 4, 500, 7, 2, 3, 9))
    assert (s.busy, s.steal) == (20.0, 9.0)


def test_unreadable_or_foreign_counters_give_none(tmp_path):
    assert cpu_clock.read(str(tmp_path / "absent")) is None
    other = tmp_path / "other"
    other.write_text("intr 1 2 3\n")
    assert cpu_clock.read(str(other)) is None


def test_a_span_between_samples_is_interpolated_and_clamped_at_the_ends():
    s = cpu_clock.Sampler()
    s.samples = [cpu_clock.Sample(100.0, 0.0, 0.0), cpu_clock.Sample(104.0, 8.0, 2.0)]
    assert s.between(101.0, 103.0) == {"busy_s": 4.0, "steal_s": 1.0}
    # outside the samples: the first / last counters (no extrapolation)
    assert s.between(90.0, 110.0) == {"busy_s": 8.0, "steal_s": 2.0}
    assert cpu_clock.Sampler().between(0.0, 1.0) is None


def test_stage_span_is_read_from_the_manifest_entry():
    s = cpu_clock.Sampler()
    t = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    s.samples = [cpu_clock.Sample(t - 20, 0.0, 0.0), cpu_clock.Sample(t, 40.0, 4.0)]
    entry = {"finished": "2027-01-15T08:00:00.000000Z", "duration_s": 10.0}
    assert bench_pretrain.stage_span_cpu(s, entry) == {"busy_s": 20.0, "steal_s": 2.0}


def test_cpu_figures_need_every_run():
    fit = [{"busy_s": 50.0, "steal_s": 0.0}]
    assert (
        bench_pretrain.cpu_figures([{"busy_s": 150.0, "steal_s": 0.0}], fit, False)["cpu_ratio"]
        == 3.0
    )
    # one run without counters: no CPU ratio rather than one over fewer runs
    assert bench_pretrain.cpu_figures([{"busy_s": 150.0, "steal_s": 0.0}, None], fit, False) == {}
