import json

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


def _write_many(args):
    out_dir, count = args
    from harness.records import write_record as write

    return [str(write(_record(), out_dir)) for _ in range(count)]


def test_concurrent_writers_never_overwrite_or_lose_a_record(tmp_path):
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        paths = [p for part in pool.map(_write_many, [(tmp_path, 40), (tmp_path, 40)]) for p in part]
    files = sorted(tmp_path.glob("*.json"))
    assert len(set(paths)) == 80 and len(files) == 80
    assert all(read_record(f)["schema"] == SCHEMA for f in files)
    assert not list(tmp_path.glob(".*tmp"))


def test_attachments_follow_their_record_name(tmp_path):
    first = _record()
    p1 = write_record(first, tmp_path, attachments={"samples_file": (".samples.jsonl", b"one\n")})
    second = _record()
    p2 = write_record(second, tmp_path, attachments={"samples_file": (".samples.jsonl", b"two\n")})
    assert p2.name == p1.stem + "~1.json"
    assert read_record(p1)["samples_file"] == str(tmp_path / f"{p1.stem}.samples.jsonl")
    assert read_record(p2)["samples_file"] == str(tmp_path / f"{p2.stem}.samples.jsonl")
    assert (tmp_path / f"{p1.stem}.samples.jsonl").read_bytes() == b"one\n"
    assert (tmp_path / f"{p2.stem}.samples.jsonl").read_bytes() == b"two\n"


def test_a_non_finite_metric_is_an_error_and_records_are_strict_json(tmp_path):
    from harness.errors import NumericalError
    from harness.records import record_json

    with pytest.raises(NumericalError, match="not finite"):
        make_record(
            "ppl",
            model={"name": "m", "checkpoint": "runs/x"},
            protocol={},
            seed=0,
            metrics={"nll": Metric(float("nan"), None, "bound", "nats/token")},
        )
    record = _record(extra_value=float("inf"), per_row=[1.0, float("nan")])
    text = record_json(record)

    def refuse(token):
        raise ValueError(token)

    back = json.loads(text, parse_constant=refuse)  # no NaN / Infinity tokens anywhere
    assert back["protocol"]["extra_value"] is None and back["protocol"]["per_row"] == [1.0, None]
    path = write_record(record, tmp_path)
    json.loads(path.read_text(), parse_constant=refuse)
