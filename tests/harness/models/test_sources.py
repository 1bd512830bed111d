"""A load with the wrong prefix names the file, what it is and the prefix that loads it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from harness.models.sources import ckpt_prefix, split_source


@pytest.mark.parametrize(
    "given, file, right",
    [
        ("mdlm-ckpt:", "prime-l2.ckpt", "prime-ckpt:"),
        ("mdlm-ckpt:", "ar.ckpt", "ar-ckpt:"),
        ("ar-ckpt:", "prime-l2.ckpt", "prime-ckpt:"),
        ("ar-ckpt:", "mdlm.ckpt", "mdlm-ckpt:"),
        ("prime-ckpt:", "ar.ckpt", "ar-ckpt:"),
        ("prime-ckpt:", "mdlm.ckpt", "mdlm-ckpt:"),
        ("", "mdlm.ckpt", "mdlm-ckpt:"),
        ("", "prime-l2.ckpt", "prime-ckpt:"),
        ("hf:", "mdlm-owt", "mdlm-hf:"),
        ("", "mdlm-owt", "mdlm-hf:"),
        ("mdlm-ckpt:", "mdlm-owt", "mdlm-hf:"),
        ("mdlm-hf:", "ar.ckpt", "ar-ckpt:"),
        ("hf:", "prime-l2.ckpt", "prime-ckpt:"),
    ],
)
def test_a_wrong_prefix_names_the_file_and_the_right_prefix(release_files, given, file, right):
    path = release_files / file
    with pytest.raises(CheckpointError) as err:
        harness.load(f"{given}{path}")
    assert repr(str(path)) in err.value.problem and f"which loads with {right}" in err.value.problem
    assert err.value.fix == f"load it as {right}{path}"


def test_a_wrong_prefix_on_the_cli_is_an_error_line(release_files):
    path = release_files / "prime-l2.ckpt"
    res = CliRunner().invoke(main, ["eval", "ppl", f"mdlm-ckpt:{path}", "--max-rows", "1"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"fix: load it as prime-ckpt:{path}" in res.output


def test_our_own_folder_with_a_release_prefix_says_to_drop_the_prefix(trained):
    path = trained("mdlm")
    for prefix in ("hf:", "mdlm-hf:", "mdlm-ckpt:"):
        with pytest.raises(CheckpointError, match="primebench checkpoint folder") as err:
            harness.load(f"{prefix}{path}")
        assert err.value.fix == f"pass the folder without a prefix: {path}"


def test_a_transformers_folder_without_hf_names_hf(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    for given in ("", "mdlm-hf:"):
        with pytest.raises(CheckpointError, match="transformers model folder") as err:
            harness.load(f"{given}{tmp_path}")
        assert err.value.fix == f"load it as hf:{tmp_path}"


def test_right_prefixes_and_missing_paths_pass_the_check(release_files, tmp_path):
    from harness.models.sources import check_source

    for source in (
        f"mdlm-hf:{release_files / 'mdlm-owt'}",
        f"mdlm-ckpt:{release_files / 'mdlm.ckpt'}",
        f"prime-ckpt:{release_files / 'prime-l2.ckpt'}",
        f"ar-ckpt:{release_files / 'ar.ckpt'}",
        f"{tmp_path / 'missing'}",
        "hf:gpt2",
        f"mdlm-ckpt:{tmp_path / 'missing.ckpt'}",
    ):
        check_source(source)


def test_ckpt_prefix_and_split_source():
    diffusion = {"vocab_embed.embedding": 0, "sigma_map.mlp.0.weight": 0, "blocks.0.adaLN_modulation.weight": 0}
    assert ckpt_prefix(diffusion, {"prime": {"target_length": 1}}) == "mdlm-ckpt:"
    assert ckpt_prefix(diffusion, {"prime": {"target_length": 4}}) == "prime-ckpt:"
    assert ckpt_prefix({"vocab_embed.embedding": 0, "blocks.0.attn_qkv.weight": 0}, {}) == "ar-ckpt:"
    assert ckpt_prefix(diffusion, {"backbone": "ar"}) == "ar-ckpt:"
    assert split_source("mdlm-hf:/x") == ("mdlm-hf:", "/x") and split_source("/x/y.ckpt") == ("", "/x/y.ckpt")
