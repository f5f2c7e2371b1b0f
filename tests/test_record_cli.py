"""`python -m course.record --ncu-case DAY LABEL N` runs exactly the case of that label and size."""

import types

import pytest

import course.record
from course.record import __main__ as record_main


def _fake_day(ran):
    def case(label, n):
        return (label, n, lambda: ran.append((label, n)))

    cases = [case("v1_naive", 256), case("v1_naive", 1024), case("v4_flash", 256)]
    return types.SimpleNamespace(ncu_cases=lambda: cases)


def test_ncu_case_is_chosen_by_label_and_size(monkeypatch):
    from numba import cuda

    ran = []
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day(ran))
    # the simulator has no profiler switches; on a GPU these bracket the measured launch
    monkeypatch.setattr(cuda, "profile_start", lambda: ran.append("start"), raising=False)
    monkeypatch.setattr(cuda, "profile_stop", lambda: ran.append("stop"), raising=False)
    assert record_main.main(["--ncu-case", "day05", "v1_naive", "1024"]) == 0
    # a warm-up launch, then the profiled one, both of the case asked for
    assert ran == [("v1_naive", 1024), "start", ("v1_naive", 1024), "stop"]


def test_ncu_case_that_does_not_exist_names_the_cases(monkeypatch, capsys):
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day([]))
    with pytest.raises(SystemExit):
        record_main.main(["--ncu-case", "day05", "v1_naive", "512"])
    assert "N=512" in capsys.readouterr().err
