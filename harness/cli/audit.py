"""``primebench audit``: check claims about bounds, idle steps and sampling precision."""

from __future__ import annotations

import click

from harness.cli.audit_bound import bound_cmd
from harness.cli.audit_gumbel import gumbel_cmd
from harness.cli.audit_idle import idle_cmd
from harness.cli.audit_precision import precision_cmd


@click.group("audit")
def audit_group():
    """Audit claims: bound validity, idle-step ratios, Gumbel truncation, fp32-vs-fp64 sampling."""


for _command in (precision_cmd, bound_cmd, idle_cmd, gumbel_cmd):
    audit_group.add_command(_command)

COMMANDS = [audit_group]
