"""``primebench models``."""

from __future__ import annotations

import json

import click

from harness.cli.options import json_option


@click.command("models")
@json_option()
def models_cmd(as_json):
    """List the registered model families and what their likelihood is."""
    from harness.models import MODELS, family_names

    rows = []
    for name in family_names():
        cls = MODELS.get(name)
        rows.append(
            {
                "family": name,
                "estimators": {e.name: e.kind for e in cls.estimators},
                "default_sampler": cls.default_sampler,
                "about": ((cls.__doc__ or "").strip().splitlines() or [""])[0],
            }
        )
    if as_json:
        click.echo(json.dumps(rows))
        return
    # an estimator named after its kind is shown once ("exact"), others as "name (kind)"
    cells = [", ".join(n if n == k else f"{n} ({k})" for n, k in row["estimators"].items()) for row in rows]
    width = max(map(len, cells))
    for row, cell in zip(rows, cells):
        click.echo(f"{row['family']:<8} {cell:<{width}}  {row['about']}")


COMMANDS = [models_cmd]
