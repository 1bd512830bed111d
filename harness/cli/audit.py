"""``primebench audit``: check claims about bounds, idle steps and sampling precision."""

from __future__ import annotations

import click


@click.group("audit")
def audit_group():
    """Audit claims: bound validity, idle-step ratios, Gumbel truncation, fp32-vs-fp64 sampling."""


COMMANDS = [audit_group]
from harness.cli.audit_precision import precision_cmd; audit_group.add_command(precision_cmd)  # noqa: E402,E702
from harness.cli.audit_bound import bound_cmd; audit_group.add_command(bound_cmd)  # noqa: E402,E702
from harness.cli.audit_idle import idle_cmd; audit_group.add_command(idle_cmd)  # noqa: E402,E702
from harness.cli.audit_gumbel import gumbel_cmd; audit_group.add_command(gumbel_cmd)  # noqa: E402,E702
