"""The training plot of the reproduce reports: curves and references read from each checkpoint's log."""

from __future__ import annotations

import json


def test_training_curves_follow_the_logs(trained, tmp_path):
    from harness.reproduce.report import plot_training, training_curves

    records = [{"model": {"name": f"tiny-{f}", "family": f, "checkpoint": str(trained(f))}} for f in ("arm", "mdlm")]
    records.append({"model": {"name": "imported", "family": "mdlm", "checkpoint": str(tmp_path / "nowhere")}})
    curves = training_curves(records)
    assert [c[0] for c in curves] == ["tiny-arm", "tiny-mdlm"]  # no log, no curve
    for (_, points, ref), family in zip(curves, ("arm", "mdlm")):
        logged = [json.loads(line) for line in (trained(family) / "train_log.jsonl").read_text().splitlines()]
        evals = [(e["step"], e["val_loss_ema"]) for e in logged if "val_loss_ema" in e]
        assert points == evals
        assert ref == [e for e in logged if "unigram_ref" in e][-1]["unigram_ref"]
    path = plot_training(records, tmp_path / "training.png", title="t")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_training(records[2:], tmp_path / "none.png", title="t") is None
