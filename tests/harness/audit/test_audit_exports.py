"""The names ``harness.audit`` exported before it became a package of submodules stay importable from it,
lazily: importing the package itself loads neither the submodules nor torch."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_idle_step_ratio_is_importable_from_the_package():
    from harness.audit import idle_step_ratio
    from harness.audit.idle import idle_step_ratio as defined

    assert idle_step_ratio is defined
    assert round(100 * idle_step_ratio(1024, 1024, 1), 2) == 36.77


def test_every_former_export_resolves_to_its_submodule():
    import harness.audit as audit

    for name, module in audit._EXPORTS.items():
        assert getattr(audit, name) is getattr(__import__(f"harness.audit.{module}", fromlist=[name]), name)
    assert sorted(audit.__all__) == sorted(audit._EXPORTS) and set(audit.__all__) <= set(dir(audit))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        audit.nonexistent  # noqa: B018


def test_importing_the_package_loads_no_torch():
    code = "import sys, harness.audit; assert 'torch' not in sys.modules and 'harness.audit.idle' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
