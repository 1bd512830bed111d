"""The one parser of image dataset specs: harness.data.images.parse_image_spec."""

from __future__ import annotations

import pytest

from harness.data.images import ImageSpec, get_image_dataset, is_image_spec, parse_image_spec
from harness.errors import DataError, PrimebenchError


@pytest.mark.parametrize("spec, expected", [
    ("image:digits", ImageSpec("digits")),
    ("image:digits:test", ImageSpec("digits", "", "test")),
    ("mnist5k:all", ImageSpec("mnist5k", "", "all")),
    ("image:cifar10:/data/cifar", ImageSpec("cifar10", "/data/cifar")),
    ("cifar10:/data/a:b:train", ImageSpec("cifar10", "/data/a:b", "train")),  # ':' inside the folder
    ("cifar10:/data/test", ImageSpec("cifar10", "/data/test")),  # '/test' is part of the folder
])
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
