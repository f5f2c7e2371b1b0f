"""A synthetic ``<name>_other_gpu`` recording made from a day's synthetic timing recording (days 6 and 7).

``on_other_gpu(base, points, gains)``: the rows of ``base`` at ``points`` as a second GPU, "Fake GPU 2", with
``copy_gain`` times the copy bandwidth, would record them: each row's ``kernel_ms`` and ``median_ms`` divided by
its rung's gain (``gains``, ``default`` for the others), its rates and ``fraction_of_copy`` computed again.
"""

from course.records import new_recording


def on_other_gpu(base, points, gains: dict, *, copy_gain: float = 1.4, default: float = 1.2):
    copy = base.ceilings["copy_gbps"] * copy_gain
    rec = new_recording(f"{base.name}_other_gpu", ceilings={**base.ceilings, "copy_gbps": copy},
                        device="Fake GPU 2", driver="fake 1.0")
    rec.notes = "synthetic"
    for row in base.rows:
        if (row["num_seqs"], row["context"]) not in points:
            continue
        gain = gains.get(row["rung"], default)
        moved = row["gbps"] * row["median_ms"] * 1e6
        median = row["median_ms"] / gain
        rec.add(**{**row, "median_ms": median, "p10_ms": 0.98 * median, "p90_ms": 1.03 * median,
                   "kernel_ms": row["kernel_ms"] / gain, "gbps": moved / median / 1e6,
                   "fraction_of_copy": moved / median / 1e6 / copy})
    return rec
