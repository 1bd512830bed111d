"""The family contract, run over every registered family: a new family passes it or is told why.

Each family is built at every setting it benches under (:meth:`ModelFamily.bench_variants`) on a
tiny backbone and driven through the interface the harness uses: the abstract methods with the
base's signatures, its declared estimators, samplers, forward process and release formats, its
config round-trip and its label. Nothing here names a family.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

import pytest
import torch

from harness.models import (
    build_model,
    families_offering,
    family_class,
    family_names,
    label_of,
    model_from_config,
)
from harness.models.base import ESTIMATOR_KINDS, FORWARD_PROCESSES, ModelFamily, check_declarations
from harness.models.sources import prefixes
from harness.nll import NLL
from harness.sampling import SAMPLERS, generate
from tests.toys import randomize

ROOT = Path(__file__).resolve().parents[3]
C, L = 9, 16
CASES = [(name, keys) for name in family_names() for keys in family_class(name).bench_variants()]
IDS = [name + "".join(f"-{k}={v}" for k, v in keys.items()) for name, keys in CASES]


def build(name: str, keys: dict, seed: int = 0) -> ModelFamily:
    model = build_model(name, vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, **keys)
    return randomize(model, seed, 0.3).eval()


def rows(n: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, C, (n, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", family_names())
def test_declared_facts(name):
    cls = family_class(name)
    check_declarations(cls)
    assert cls.family == name and issubclass(cls, ModelFamily) and not inspect.isabstract(cls)
    assert cls.forward_process in FORWARD_PROCESSES
    assert all(e.kind in ESTIMATOR_KINDS for e in cls.estimators)
    assert len({e.suffix for e in cls.estimators}) == len(cls.estimators)  # metric names never collide
    assert all(s in SAMPLERS for s in cls.samplers)
    # every sampler it lists can draw from its forward process
    assert all(cls.forward_process in SAMPLERS.get(s).processes for s in cls.samplers)
    assert set(cls.release_formats) <= set(prefixes()), f"{name} declares a load prefix the loaders do not know"
    assert cls.bench_variants() and cls.bench_nll_cost_target >= 1.0
    assert name in families_offering(cls.estimators[0].name)
    # exact families have no corruption to draw; Monte-Carlo ones do
    assert (cls.forward_process == "none") == (not cls.uses_time_sampler)


@pytest.mark.parametrize("method", ["log_probs", "loss", "nll", "greedy_matches", "score", "masked_cross_entropy"])
@pytest.mark.parametrize("name", family_names())
def test_signatures_match_the_base(name, method):
    """Every family's methods take the base's parameters, under the same names and kinds."""
    base = inspect.signature(getattr(ModelFamily, method)).parameters
    own = inspect.signature(getattr(family_class(name), method)).parameters
    assert [(p.name, p.kind) for p in own.values()] == [(p.name, p.kind) for p in base.values()]


@pytest.mark.parametrize("name,keys", CASES, ids=IDS)
def test_the_interface_runs(name, keys):
    model = build(name, keys)
    x0 = rows()
    assert model.family == name and model.units_per_token >= 1
    # the instance's process is the declared one, over the values its units take
    if model.forward_process == "none":
        assert model.process is None
    else:
        assert model.process.name == model.forward_process and model.process.mask_id == model.mask_id
    assert model.nelbo_block_size is None or L % model.nelbo_block_size == 0
    # the training loss: a finite scalar with a gradient to every trained weight
    model.train()
    loss = model.loss(x0, generator=torch.Generator().manual_seed(1))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
    model.eval()
    # every estimator from the same draws, each of its declared kind, one number per row
    names = [e.name for e in model.estimators]
    got = model.nll(x0, estimators=names, num_samples=2, generator=torch.Generator().manual_seed(2))
    assert [n.kind for n in got] == [e.kind for e in model.estimators]
    for out in got:
        assert isinstance(out, NLL) and out.nats.shape == (3,) and bool(torch.isfinite(out.nats).all())
        assert bool((out.nats > 0).all()) and bool((out.tokens > 0).all())
    default = model.nll(x0, num_samples=2, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(default.nats, got[0].nats)
    # lm-eval's pair: the default estimator on the continuation, and the greedy check
    corruptible = torch.zeros_like(x0, dtype=torch.bool)
    corruptible[:, L // 2 :] = True
    scored, greedy = model.score(x0, corruptible=corruptible, greedy=True, generator=torch.Generator().manual_seed(3))
    assert scored.nats.shape == (3,) and greedy.shape == (3,) and greedy.dtype == torch.bool
    # a family that masks reports the training health's context check; one that does not, None
    ce = model.masked_cross_entropy(x0, rate=1.0)
    assert (ce is None) == (model.forward_process == "none")


@pytest.mark.parametrize("name,keys", CASES, ids=IDS)
def test_every_declared_sampler_draws_valid_tokens(name, keys):
    model = build(name, keys)
    for sampler in model.samplers:
        spec = SAMPLERS.get(sampler)
        out = generate(
            model,
            sampler,
            num_samples=2,
            batch_size=2,
            steps=4 if spec.uses_steps else None,
            generator=0,
            bos_id=0 if sampler == model.token_by_token_sampler and not model.uses_time_sampler else None,
        )
        assert out.tokens.shape == (2, L) and int(out.tokens.min()) >= 0 and int(out.tokens.max()) < C, sampler


@pytest.mark.parametrize("name,keys", CASES, ids=IDS)
def test_config_builds_the_same_model_and_names_it(name, keys):
    cls = family_class(name)
    cfg = cls.config_class(family=name, d_model=16, n_layers=1, n_heads=2, **keys)
    cfg.check()
    model = model_from_config(cfg, vocab_size=C, seq_len=L)
    torch.manual_seed(0)
    again = model_from_config(dataclasses.replace(cfg), vocab_size=C, seq_len=L)
    assert type(model) is type(again) and set(model.state_dict()) == set(again.state_dict())
    assert isinstance(label_of(cfg), str) and label_of(cfg).startswith(name)
    json.dumps(model.protocol())  # a record carries it
    assert model.hparams == again.hparams


def test_a_wrong_declaration_is_refused_when_the_class_is_made():
    base = family_class(family_names()[0])
    with pytest.raises(TypeError, match="forward_process"):
        type("Broken", (base,), {"family": "broken", "forward_process": "gaussian"})
    with pytest.raises(TypeError, match="samplers"):
        type("Broken", (base,), {"family": "broken", "default_sampler": "no-such-sampler"})
    with pytest.raises(TypeError, match="no estimator"):
        type("Broken", (base,), {"family": "broken", "estimators": ()})


def test_an_unfinished_family_cannot_be_built():
    class Half(ModelFamily):  # declares nothing and implements nothing: abstract, so never built
        pass

    with pytest.raises(TypeError, match="abstract"):
        Half(vocab_size=C, seq_len=L, hparams={})


SHARED = ("harness/evaluation", "harness/sampling", "harness/lmeval", "harness/metrics", "harness/health.py")


def test_shared_code_never_probes_a_model_with_getattr_or_hasattr():
    """Evaluators, samplers, the lm-eval adapter and the training health read declared facts."""
    offenders = []
    for where in SHARED:
        path = ROOT / where
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            tree = ast.parse(file.read_text())
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and node.args
                    and "model" in ast.unparse(node.args[0])
                ):
                    offenders.append(f"{file.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def test_the_audits_find_their_family_by_what_it_offers():
    from harness.errors import PrimebenchError
    from harness.models import family_of_kind

    found = family_of_kind("paper-objective")
    assert any(e.kind == "paper-objective" for e in found.estimators) and hasattr(found, "toy_bound_audit")
    with pytest.raises(PrimebenchError, match="families offer a 'bound' estimator"):
        family_of_kind("bound")  # several families do: the audit would not know which
