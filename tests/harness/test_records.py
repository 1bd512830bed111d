import json
import math

import pytest

from harness.errors import PrimebenchError
from harness.records import SCHEMA, Metric, make_record, read_record, write_record


def _record(**kw):
    return make_record(
        "ppl",
        model={"name": "m", "family": "arm"},
        metrics={"nll": Metric(1.5, 0.0, "exact", "nats/token"), "x": Metric(2.0, float("nan"), "bound", "nats/token")},
        protocol={"data": "wiki-embedded:validation", **kw},
        seed=3,
    )


def test_record_has_protocol_and_provenance():
    rec = _record()
    assert rec["schema"] == SCHEMA
    assert rec["metrics"]["nll"] == {"value": 1.5, "stderr": 0.0, "kind": "exact", "units": "nats/token"}
    assert rec["metrics"]["x"]["stderr"] is None  # NaN is recorded as "not estimable"
    prov = rec["provenance"]
    for key in ("seed", "packages", "git_revision", "device", "created"):
        assert key in prov
    assert "torch" in prov["packages"]


def test_metric_kind_validated():
    with pytest.raises(ValueError):
        Metric(1.0, 0.0, "upper", "nats")


def test_write_read_round_trip_and_no_overwrite(tmp_path):
    rec = _record()
    p1 = write_record(rec, tmp_path)
    p2 = write_record(rec, tmp_path)
    assert p1 != p2 and p1.exists() and p2.exists()
    assert read_record(p1) == json.loads(json.dumps(rec, default=str))


def test_read_record_errors(tmp_path):
    with pytest.raises(PrimebenchError, match="does not exist"):
        read_record(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PrimebenchError, match="not valid JSON"):
        read_record(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(PrimebenchError, match="not a primebench record"):
        read_record(other)
