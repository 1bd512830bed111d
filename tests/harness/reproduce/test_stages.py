import json

import pytest

from harness.reproduce.stages import Stages, config_hash, finished_checkpoint


def test_config_hash_is_canonical_and_sensitive():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
    assert len(config_hash({})) == 16


def test_record_stage_skips_when_done_and_redoes_on_a_new_config_or_force(tmp_path):
    calls = []

    def make(value):
        def run():
            calls.append(value)
            return {"evaluation": "x", "value": value}

        return run

    stages = Stages(tmp_path)
    assert stages.record("s", {"k": 1}, make(1))["value"] == 1
    assert Stages(tmp_path).record("s", {"k": 1}, make(2))["value"] == 1  # done: read back, not recomputed
    assert calls == [1]
    again = Stages(tmp_path)
    assert again.record("s", {"k": 2}, make(3))["value"] == 3 and again.ran == ["s"]  # another config: redone
    assert Stages(tmp_path, force=True).record("s", {"k": 2}, make(4))["value"] == 4
    manifest = json.loads((tmp_path / "stages" / "s.json").read_text())
    assert manifest["status"] == "done" and manifest["hash"] == config_hash({"k": 2})
    assert json.loads((tmp_path / "records" / "s.json").read_text())["value"] == 4


def test_record_stage_recomputes_a_damaged_record_and_an_unreadable_manifest(tmp_path):
    Stages(tmp_path).record("s", {"k": 1}, lambda: {"v": 1})
    (tmp_path / "records" / "s.json").write_text("{ not json")
    assert Stages(tmp_path).record("s", {"k": 1}, lambda: {"v": 2}) == {"v": 2}
    (tmp_path / "stages" / "s.json").write_text("garbage")
    assert Stages(tmp_path).record("s", {"k": 1}, lambda: {"v": 3}) == {"v": 3}


def test_a_failing_stage_leaves_no_record_and_no_done_manifest(tmp_path):
    def boom():
        raise RuntimeError("stage failed")

    try:
        Stages(tmp_path).record("s", {"k": 1}, boom)
    except RuntimeError:
        pass
    assert not (tmp_path / "records" / "s.json").exists() and not (tmp_path / "stages" / "s.json").exists()


def test_train_stage_skips_resumes_and_discards(tmp_path, monkeypatch):
    import harness.reproduce.stages as training  # where Stages.train looks up train()
    from harness.config import load_config

    seen = []

    def fake_train(cfg, out, *, resume=False, restart=False, bar=None, **kw):
        seen.append(resume)
        if restart:
            from harness.run_folder import clear_run_folder

            clear_run_folder(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.safetensors").write_bytes(b"w")
        (out / "train_log.jsonl").write_text(json.dumps({"step": cfg.train.steps}) + "\n")

    monkeypatch.setattr(training, "train", fake_train)
    cfg = load_config("tiny/mdlm", ["train.steps=3"])
    Stages(tmp_path).train("m", cfg)
    assert finished_checkpoint(tmp_path / "m", 3) and seen == [False]
    Stages(tmp_path).train("m", cfg)
    assert seen == [False]  # done: skipped
    # an interrupted run of the same config resumes
    Stages(tmp_path)._write_manifest("m", {"train": cfg.to_dict()}, "running")
    (tmp_path / "m" / "trainer_state.pt").write_bytes(b"s")
    Stages(tmp_path).train("m", cfg)
    assert seen == [False, True]
    # a partial run of another config is discarded, not resumed
    other = load_config("tiny/mdlm", ["train.steps=4"])
    (tmp_path / "m" / "trainer_state.pt").write_bytes(b"s")
    (tmp_path / "m" / "notes.txt").write_text("mine")
    Stages(tmp_path).train("m", other)
    assert seen == [False, True, False] and not (tmp_path / "m" / "trainer_state.pt").exists()
    assert (tmp_path / "m" / "notes.txt").read_text() == "mine"  # only the run's own files are removed


def test_a_folder_the_job_did_not_write_is_refused_and_kept(tmp_path, monkeypatch):
    import harness.reproduce.stages as training  # where Stages.train looks up train()
    from harness.config import load_config
    from harness.errors import InputError

    monkeypatch.setattr(training, "train", lambda *a, **k: pytest.fail("must not train"))
    mine = tmp_path / "m"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"my own checkpoint")
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="did not write"):
        Stages(tmp_path).train("m", load_config("tiny/mdlm", ["train.steps=3"]))
    with pytest.raises(InputError, match="did not write"):
        Stages(tmp_path, force=True).train("m", load_config("tiny/mdlm", ["train.steps=3"]))
    assert (mine / "model.safetensors").read_bytes() == b"my own checkpoint" and (mine / "notes.txt").exists()


def test_finished_checkpoint_reads_the_last_log_line(tmp_path):
    assert not finished_checkpoint(tmp_path, 1)
    (tmp_path / "model.safetensors").write_bytes(b"w")
    (tmp_path / "train_log.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert finished_checkpoint(tmp_path, 2) and not finished_checkpoint(tmp_path, 3)
    (tmp_path / "train_log.jsonl").write_text("broken\n")
    assert not finished_checkpoint(tmp_path, 1)
