"""The one parser of image dataset specs: harness.data.images.parse_image_spec."""

from __future__ import annotations

import pytest

from harness.data.images import ImageSpec, get_image_dataset, is_image_spec, parse_image_spec
from harness.errors import DataError, PrimebenchError


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("image:digits", ImageSpec("digits")),
        ("image:digits:test", ImageSpec("digits", "", "test")),
        ("mnist5k:all", ImageSpec("mnist5k", "", "all")),
        ("image:cifar10:/data/cifar", ImageSpec("cifar10", "/data/cifar")),
        ("cifar10:/data/a:b:train", ImageSpec("cifar10", "/data/a:b", "train")),  # ':' inside the folder
        ("cifar10:/data/test", ImageSpec("cifar10", "/data/test")),  # '/test' is part of the folder
    ],
)
def test_parse_and_round_trip(spec, expected):
    parsed = parse_image_spec(spec)
    assert parsed == expected
    assert parse_image_spec(str(parsed)) == parsed  # corpus form image:...
    assert parse_image_spec(parsed.spec) == parsed  # dataset form NAME[:ARG][:SPLIT]
    assert str(parsed).startswith("image:") and is_image_spec(str(parsed))


def test_split_helpers():
    spec = parse_image_spec("image:cifar10:/data/cifar")
    assert spec.dataset == "cifar10:/data/cifar" and spec.split is None
    assert spec.with_split("train").spec == "cifar10:/data/cifar:train"
    assert spec.with_default_split("test").split == "test"
    assert spec.with_split("train").with_default_split("test").split == "train"
    assert str(spec.with_split("test")) == "image:cifar10:/data/cifar:test"
    assert not is_image_spec("wiki-embedded") and not is_image_spec("digits")


@pytest.mark.parametrize("spec", ["", "image:", "image::train", ":test"])
def test_a_spec_without_a_dataset_is_a_clear_error(spec):
    with pytest.raises(DataError, match="names no dataset") as info:
        parse_image_spec(spec)
    assert "image:NAME[:SPLIT]" in info.value.fix and "digits" in info.value.fix


def test_unknown_dataset_gets_did_you_mean():
    with pytest.raises(PrimebenchError, match="did you mean 'digits'"):
        parse_image_spec("image:digts:test")


def test_get_image_dataset_takes_either_form_and_a_parsed_spec():
    a = get_image_dataset("digits:test")
    b = get_image_dataset("image:digits:test")
    c = get_image_dataset(parse_image_spec("image:digits").with_split("test"))
    assert a.spec == b.spec == c.spec == "digits:test"
    assert a.tokens.equal(b.tokens) and a.tokens.equal(c.tokens)
    assert get_image_dataset("digits").split == "train"  # the default split


def _cifar_folder(root, split="test", n=4, payload=None):
    import pickle

    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    pixels = []
    for name in names:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        pixels.append(data)
        batch = {
            b"batch_label": b"testing batch",
            b"labels": list(range(n)),
            b"data": data,
            b"filenames": [b"x.png"] * n,
        }
        if payload is not None:
            batch[b"extra"] = payload
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return np.concatenate(pixels)


def test_cifar10_batches_are_read_without_torchvision_pickle(tmp_path):
    import numpy as np

    pixels = _cifar_folder(tmp_path)
    ds = get_image_dataset(f"cifar10:{tmp_path}:test")
    expected = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # (N, H, W, C) in raster order
    assert ds.tokens.shape == (4, 32 * 32 * 3) and ds.levels == 256
    assert ds.tokens.numpy().astype(np.uint8).tobytes() == expected.tobytes()


class _Payload:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


def test_a_cifar10_batch_with_a_payload_is_refused_and_nothing_runs(tmp_path, monkeypatch):
    from harness.safe_load import UnsafeFileError

    _cifar_folder(tmp_path / "c", payload=_Payload())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeFileError, match="posix.system|os.system|not allowed"):
        get_image_dataset(f"cifar10:{tmp_path / 'c'}:test")
    assert not (tmp_path / "PWNED").exists()


def test_no_loader_calls_pickle_load_or_torch_load_without_weights_only():
    """No call in the package unpickles without an allow-list: no pickle.load(s), no Unpickler other
    than our restricted ones, no torch.load(weights_only=False), no torchvision dataset class."""
    import ast
    from pathlib import Path

    import harness

    root = Path(harness.__file__).parent
    bad = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            unsafe_kw = any(
                k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            )
            if name in ("pickle.load", "pickle.loads", "pickle.Unpickler") or unsafe_kw or "CIFAR10" in name:
                bad.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    assert not bad, bad
