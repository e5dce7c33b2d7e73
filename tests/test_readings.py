"""The recorded readings of real machines (feedgpu.readings), and the copy model held to them.

No GPU is needed: the readings of ``readings/h200-2026-11-26`` are the GPU. Every loop of
copies and compute recorded there (the bench's two, notebook 05's three) must be predicted
by the copy model within 0.75-1.25, from the machine's recorded copies alone (never from
the loop itself). The model's error at each recorded copy size is printed, not asserted
(``pytest -s tests/test_readings.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from feedgpu.models.copies import CopyCosts, LinearCost, training_loop_range_s, training_loop_s
from feedgpu.readings import (
    FIT_SIZES,
    READINGS_ROOT,
    ReadingsError,
    available_readings,
    load_readings,
    write_readings,
)
from feedgpu.models.device import simulate_training

pytestmark = pytest.mark.unit

H200 = "h200-2026-11-26"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "gpu-readings" / H200
MIB = 2**20


@pytest.fixture(scope="module")
def h200():
    return load_readings(H200)


def test_the_h200_folder_is_in_the_repository_and_names_its_machine(h200):
    assert H200 in available_readings(), f"{H200} should be under {READINGS_ROOT}"
    assert h200.machine["device"] == "NVIDIA H200" and h200.machine["cpus"] == 16
    assert h200.machine["torch"].startswith("2.11"), "the H200 machine had torch 2.11"
    line = h200.describe()
    assert "NVIDIA H200" in line and "16 cores" in line and "2.11.0" in line and "2026-11-26" in line, line


@pytest.mark.skipif(not SHARED.is_dir(), reason="the original readings (../shared) are not beside this clone")
def test_recorded_files_are_kept_byte_for_byte():
    for original in sorted(SHARED.iterdir()):
        copy = READINGS_ROOT / H200 / original.name
        assert copy.is_file(), f"{original.name} is missing from readings/{H200}"
        assert copy.read_bytes() == original.read_bytes(), f"{original.name} differs from the recorded file"


def test_the_h200_readings_as_read(h200):
    sizes, seconds = h200.copy_table("h2d_pinned")
    assert sizes[0] == 4096 and sizes[-1] == 512 * MIB and sizes == sorted(sizes), "4 KiB to 512 MiB, in order"
    # 64 MiB pinned in 1.217 ms there: 55 GB/s (the README's headline figure)
    assert 64 * MIB / seconds[sizes.index(64 * MIB)] == pytest.approx(55.1e9, rel=0.01)
    for kind in ("h2d_pageable", "h2d_pinned", "d2h_pinned", "pin_memory_cached", "host_copy_1thread",
                 "host_copy_all_threads"):
        assert kind in h200.kinds(), kind
    assert [loop.name for loop in h200.copy_loops][:2] == ["bench, plain copies", "bench, pinned + non_blocking + prefetch"]
    assert len(h200.copy_loops) == 5 and all(loop.source for loop in h200.copy_loops), "five loops, each with its source"
    assert sorted({loop.num_workers for loop in h200.loops}) == [0, 1, 2, 4, 6, 8, 12, 15]
    assert h200.stall_free_step_s == pytest.approx(0.00804, rel=0.01)
    assert {"diagnosis_nw0", "diagnosis_nw2", "diagnosis_nw6", "diagnosis_nw15"} <= set(h200.diagnoses)
    assert h200.bench_figure("gpu model / measured, plain loop") == pytest.approx(0.6445, rel=1e-3)
    with pytest.raises(KeyError, match="h2d_pinned"):
        h200.copy_table("no such copy")


def _replay(costs: CopyCosts, loop) -> float:
    copy_s = costs.loop_copy_s(loop.batch_bytes, pinned=loop.pinned)
    return training_loop_s(loop.n_batches, copy_s, loop.compute_s, overlapped=loop.overlapped)


def _held(costs: CopyCosts, recorded, fitted_on: str) -> list[str]:
    """Every recorded loop of ``recorded`` against ``costs``: a pinned loop's model and
    simulation within 0.75-1.25, a pageable loop inside the predicted range (the model's and
    the simulated device's, each at the ends of the range); the report's lines."""
    report = []
    for loop in recorded.copy_loops:
        how = dict(pinned=loop.pinned, non_blocking=loop.non_blocking, prefetch=loop.prefetch)
        low, high = training_loop_range_s(loop.n_batches, loop.batch_bytes, loop.compute_s, costs,
                                          pinned=loop.pinned, overlapped=loop.overlapped)
        simulated = [simulate_training(loop.n_batches, loop.batch_bytes, loop.compute_s, costs.at_end(end),
                                       **how).total_s for end in ("fast", "slow")]
        said = (f"{loop.name} on {recorded.name}, the model of {fitted_on}: recorded {loop.measured_s * 1e3:.2f} ms, "
                f"model {low * 1e3:.2f}-{high * 1e3:.2f} ms, simulated {simulated[0] * 1e3:.2f}-{simulated[1] * 1e3:.2f} ms")
        if loop.pinned:
            assert low == high and simulated[0] == simulated[1], f"a pinned copy is a point: {said}"
            for predicted in (low, simulated[0]):
                assert 0.75 <= predicted / loop.measured_s <= 1.25, said
        else:
            assert high > 1.25 * low, f"a pageable copy is a range, wider than the band: {said}"
            for least, most in ((low, high), simulated):
                assert least <= loop.measured_s <= most, f"outside the predicted range: {said}"
        report.append(said)
    return report


@pytest.mark.parametrize("name", available_readings())
def test_the_copy_model_predicts_every_recorded_loop(name):
    """Each recorded loop, from its machine's recorded copies only: pinned within 0.75-1.25,
    pageable inside the predicted range."""
    recorded = load_readings(name)
    assert recorded.copy_loops, f"{name} records no loops of copies and compute"
    print("\n".join(["", f"copy loops replayed on {recorded.describe()}:", *_held(recorded.copy_costs(), recorded, name)]))


@pytest.mark.parametrize("fitted, other", [("h200-2026-11-26", "h100-2026-11-27"), ("h100-2026-11-27", "h200-2026-11-26")])
def test_one_machine_s_model_predicts_the_other_s_loops(fitted, other):
    """Leave one folder out: the model fitted on one machine's copies holds the other's loops
    (the H200's on the H100 and back): pinned within 0.75-1.25, pageable inside the range."""
    print("\n".join(["", *_held(load_readings(fitted).copy_costs(), load_readings(other), fitted)]))


def test_a_pageable_copy_is_a_range_from_every_reading_and_a_pinned_one_a_point(h200, tmp_path):
    """The H200's range runs from its slowest pageable or one-thread host copy of a batch's
    size (512 MiB on one thread: 5.5 GB/s) to its fastest pageable copy (16 GB/s, alone: it
    recorded none in a loop); a folder with repeated loops from fresh sources takes its fast
    end from them, and its slow end from every reading."""
    costs = h200.copy_costs()
    low, high = costs.loop_copy_range_s(64 * MIB, pinned=False)
    assert costs.pageable_range.slow.bytes_per_s == pytest.approx(512 * MIB / 0.0982, rel=0.01)
    assert 16e9 < costs.pageable_range.fast.bytes_per_s < 17e9 and high > 2.5 * low
    assert costs.loop_copy_range_s(64 * MIB, pinned=True)[0] == costs.loop_copy_range_s(64 * MIB, pinned=True)[1]
    row = {"h2d_pageable": {"median_s": 0.010, "all_s": [0.009, 0.010, 0.012]},
           "h2d_pageable_loops": {"median_s": 0.008, "all_s": [0.007, 0.008, 0.016]},
           "h2d_pinned": {"median_s": 0.002}, "pin_memory_cached": {"median_s": 0.001}}
    copies = [{"bytes": b, **{kind: {k: ([t * b / (64 * MIB) for t in v] if isinstance(v, list) else v * b / (64 * MIB))
                                     for k, v in data.items()} for kind, data in row.items()}}
              for b in (16 * MIB, 64 * MIB)]
    folder = write_readings(tmp_path / "made-up-2026-11-28", {"copies_and_loop.json": {"device": "made up", "copies": copies}})
    made = load_readings(folder).pageable_range()
    assert made.time_s(64 * MIB) == pytest.approx((0.007, 0.016)), "fast from the loops, slow from every reading"


def test_a_folder_of_the_course_s_recorder_has_copies_in_a_loop():
    """readings/h100-2026-11-27 was written by feedgpu-record: its copies in a loop were measured, not derived."""
    h100 = load_readings("h100-2026-11-27")
    assert h100.machine["device"].startswith("NVIDIA H100") and h100.machine["guards"] == {"empty_host_cache": False}
    for kind in ("h2d_pageable_in_loop", "pin_memory_1thread", "pin_memory_cached"):
        assert kind in h100.kinds(), kind
    assert h100.pin_thread_kind() == "pin_memory_1thread"
    in_loop = h100.copy_costs().pageable_in_loop
    fitted = h100.fit("h2d_pageable_in_loop", [b for b in FIT_SIZES if b >= 4 * MIB]).cost
    assert in_loop == fitted and in_loop != h100.streaming_cost(), "measured in a loop, fitted over batch sizes"
    assert [loop.name for loop in h100.copy_loops] == [loop.name for loop in load_readings(H200).copy_loops]
    assert {"diagnosis_nw0", "diagnosis_nw15"} <= set(h100.diagnoses) and h100.stall_free_step_s > 0


def test_the_loops_are_predicted_from_data_other_than_the_loops(h200, tmp_path):
    """The copy model of a folder does not read its loops: without them it is the same."""
    folder = tmp_path / H200
    shutil.copytree(h200.folder, folder)
    (folder / "copy_loops.json").unlink()
    (folder / "bench_gpu.json").unlink()
    without = load_readings(folder)
    assert without.copy_loops == [] and without.copy_costs() == h200.copy_costs()


def test_copies_measured_alone_do_not_predict_pageable_loops(h200):
    """Why the model needs the copy in a loop: the sweep's line (copies alone) misses the pageable loops."""
    alone = h200.copy_costs()
    alone = CopyCosts(pageable=alone.pageable, pinned=alone.pinned, pinning=alone.pinning)  # no pageable_in_loop
    for loop in h200.copy_loops:
        ratio = _replay(alone, loop) / loop.measured_s
        if loop.pinned:
            assert 0.75 <= ratio <= 1.25, f"{loop.name}: pinned copies cost the same in a loop ({ratio:.2f})"
        else:
            assert ratio < 0.75, f"{loop.name}: a pageable loop should cost more than its copies alone ({ratio:.2f})"


def test_the_model_error_at_each_recorded_size_is_reported(h200):
    """The straight lines' error at every recorded size, printed (the fit covers 4 KiB-64 MiB only)."""
    costs = h200.copy_costs()
    lines = {"h2d_pageable": costs.pageable, "h2d_pinned": costs.pinned, "pin_memory_cached": costs.pinning}
    rows = [f"{'size':>10} " + " ".join(f"{kind:>18}" for kind in lines) + f" {'pageable in a loop':>18}"]
    sizes, _ = h200.copy_table("h2d_pageable")
    for nbytes in sizes:
        errors = [line.time_s(nbytes) / h200.median_at(kind, nbytes) - 1 for kind, line in lines.items()]
        in_loop = costs.pageable_in_loop.time_s(nbytes) / h200.median_at("h2d_pageable", nbytes) - 1
        rows.append(f"{nbytes / MIB:>8.3f}Mi " + " ".join(f"{e:>+18.0%}" for e in errors) + f" {in_loop:>+18.0%}")
    print("\n".join(["", f"model / recorded - 1 by size, {h200.name} (lines fitted over {FIT_SIZES[0]}-{FIT_SIZES[-1]} B):"]
                    + rows))
    fitted = [b for b in sizes if b in FIT_SIZES]
    worst = max(abs(costs.pinned.time_s(b) / h200.median_at("h2d_pinned", b) - 1) for b in fitted if b >= MIB)
    assert worst < 0.25, f"the pinned line should hold over its own sizes from 1 MiB up (worst {worst:.0%})"


def test_median_at_interpolates_between_recorded_sizes_only(h200):
    at_32, at_64 = h200.median_at("h2d_pageable", 32 * MIB), h200.median_at("h2d_pageable", 64 * MIB)
    assert h200.median_at("h2d_pageable", 48 * MIB) == pytest.approx((at_32 + at_64) / 2)
    with pytest.raises(ValueError):
        h200.median_at("h2d_pageable", 2**31)


def test_streaming_cost_is_the_largest_copy(h200):
    sizes, seconds = h200.copy_table("h2d_pageable")
    cost = h200.streaming_cost()
    assert cost.bytes_per_s == pytest.approx(sizes[-1] / seconds[-1]) and 7e9 < cost.bytes_per_s < 8e9


def test_a_folder_is_written_whole_and_read_back(tmp_path):
    copies = [{"bytes": b, "h2d_pageable": {"median_s": 1e-5 + b / 10e9, "min_s": 1e-5 + b / 11e9, "all_s": [1e-5 + b / 10e9]},
               "h2d_pinned": {"median_s": 5e-6 + b / 25e9}, "pin_memory_cached": {"median_s": 5e-6 + b / 30e9}}
              for b in FIT_SIZES]
    main = {"device": "Test GPU", "torch": "2.14.1", "cpus": 8, "when": "2026-11-27 10:00:00", "copies": copies}
    loops = {"about": "test", "loops": [dict(name="a loop", n_batches=4, batch_bytes=MIB, pinned=True, non_blocking=True,
                                             prefetch=True, measured_s=0.01, compute_s=0.002, source="made up")]}
    folder = write_readings(tmp_path / "test-gpu-2026-11-27", {"copies_and_loop.json": main, "copy_loops.json": loops,
                                                                "machine.json": {"python": "3.11"}})
    got = load_readings(folder)
    assert got.name == "test-gpu-2026-11-27" and got.machine["python"] == "3.11" and got.machine["cpus"] == 8
    assert got.copy_loops[0].overlapped and got.copy_loops[0].batch_bytes == MIB
    assert got.copy_costs().pinned.bytes_per_s == pytest.approx(25e9, rel=1e-6)
    assert got.copy_costs().pageable_in_loop == LinearCost(got.copy_costs().pageable.latency_s,
                                                           FIT_SIZES[-1] / (1e-5 + FIT_SIZES[-1] / 10e9))
    with pytest.raises(FileExistsError):
        write_readings(folder, {"copies_and_loop.json": main})
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name], "nothing left beside it"


def test_a_failed_write_leaves_nothing(tmp_path):
    class Unwritable:
        pass

    with pytest.raises(TypeError):
        write_readings(tmp_path / "broken", {"copies_and_loop.json": {"copies": []}, "other.json": {"x": Unwritable()}})
    assert list(tmp_path.iterdir()) == [], "a failed write must leave no folder, scratch or final"
    with pytest.raises(ReadingsError):
        write_readings(tmp_path / "no-copies", {"machine.json": {}})


def test_a_folder_that_is_not_one_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReadingsError, match=H200):
        load_readings(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "copies_and_loop.json").write_text("{not json")
    with pytest.raises(ReadingsError, match="cannot read"):
        load_readings(bad)
    assert json.loads((READINGS_ROOT / H200 / "copy_loops.json").read_text())["loops"], "the course's own loops file"
