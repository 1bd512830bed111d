import torch

from harness.graph import tracked


def test_tracked_only_when_grad_mode_records_the_tensor():
    leaf = torch.ones(3, requires_grad=True)
    assert tracked(leaf) and tracked(leaf * 2)  # a graph holds both
    assert not tracked(torch.ones(3))  # nothing to record
    with torch.no_grad():
        assert not tracked(leaf) and not tracked(leaf * 2)  # evaluation: free to overwrite its own tensors
    with torch.inference_mode():
        assert not tracked(leaf)
