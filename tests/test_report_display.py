"""How the note prints numbers: each display bug of issue 31 with a test that failed before its fix.

Pure formatters and the KL figure, called directly; the sections that print them are checked on stored
campaigns in test_report_note.py, test_report_kinds.py and test_command_arms.py.
"""

from __future__ import annotations

from frankenstein.measure.noise import judge_spread
from frankenstein.report.markdown import difference, row_nums
from frankenstein.report.note import cut_env
from frankenstein.report.plots import kl_figure

SEED_SERVED = [14.359, 14.348, 14.444, 14.407, 14.360]  # the seed note's served arm, ms per verify step


def test_block_rows_keep_trailing_zeros_to_the_datas_precision() -> None:
    assert row_nums(SEED_SERVED) == ["14.359", "14.348", "14.444", "14.407", "14.360"]
    assert row_nums([10.0, 10.2, None], [10.1]) == ["10.0", "10.2", "—", "10.10"]  # the mean one decimal more


def test_absolute_difference_is_in_the_metrics_unit() -> None:
    assert difference(-0.703, "verify_step_ms") == "-0.70 ms per step"
    assert difference(-0.0042, "decode_ms_per_token") == "-0.0042 ms per token"
    assert difference(1.5, "ttft_ms") == "+1.50 ms"


def test_noise_warning_never_reads_zero_against_zero() -> None:
    served = [10.0, 10.01, 9.995, 10.012, 10.0, 10.008]  # ~0.07 % spread against a 0.02 % effect
    text = judge_spread(served, 0.0002, "verify_step_ms")
    assert text is not None
    assert " 0%" not in text and "0.0%" not in text
    assert "varies 0.068% start to start" in text and "more than the 0.020% effect" in text


def test_long_engine_env_values_are_cut() -> None:
    cuda = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471"
    cell = cut_env(f"{cuda}, OMP_NUM_THREADS=4")
    assert cell == "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=…, OMP_NUM_THREADS=4"


def test_kl_plot_is_a_log_axis_of_positive_kl_with_positions_above_the_threshold_marked() -> None:
    candidate = [0.0, 1e-4, 0.002, 0.01, 0.6, 0.9]
    fig = kl_figure(candidate, [0.0, 1e-5, 3e-4], tolerance=0.025, threshold=0.5)
    [ax] = fig.axes
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] > 0
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "2 candidate position(s) above the threshold" in labels
    assert any(t.startswith("candidate vs served, 6 positions, 1 at or below") for t in labels)
    assert "threshold 0.5" in labels and "tolerance (mean) 0.025" in labels
