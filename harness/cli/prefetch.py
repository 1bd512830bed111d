"""``primebench prefetch``."""

from __future__ import annotations

import json

import click

from harness.cli.options import command, json_option


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # unreachable


@command("prefetch")
@click.argument("targets", nargs=-1, required=True, metavar="TARGET...")
@click.option(
    "--check",
    is_flag=True,
    help="Fetch nothing: say, without the network, which targets are not in the caches yet (exit 1 if any).",
)
@json_option()
def prefetch_cmd(targets, check, as_json):
    """Fetch what later runs need into the caches, so they run with HF_HUB_OFFLINE=1.

    TARGET: a reproduce preset (owt, zeroshot, genppl, precision), a release on the hub
    (mdlm-hf:ORG/NAME[@REV], prime-ckpt:ORG/NAME/FILE.ckpt, ...), an hf: model or judge
    (hf:gpt2-large, gpt2-large), a --data spec (lambada, openwebtext, hf:NAME:SPLIT) or an lm-eval
    task. Prints what was fetched, its size and how many files had their hash checked; a second run
    fetches nothing."""
    from harness.prefetch import expand, missing, prefetch

    items = expand(list(targets))
    if check:
        rows = [{"target": t, "missing": missing(t)} for t in items]
        if as_json:
            click.echo(json.dumps(rows, indent=2))
        else:
            for row in rows:
                state = f"missing: {row['missing']}" if row["missing"] else "cached"
                click.echo(f"{row['target']}: {state}")
        if any(row["missing"] for row in rows):
            raise click.exceptions.Exit(1)
        return
    outcomes = []
    for target in items:
        got = prefetch(target)
        outcomes.append(got)
        if not as_json:
            fetched = f"fetched {len(got.files)} file(s), {_size(got.bytes)}" if got.files else "nothing to fetch"
            extra = f"; {got.verified} hash(es) checked" if got.verified else ""
            at = f" at {got.commit[:12]}" if got.commit else ""
            click.echo(f"{target} ({got.kind}{at}): {fetched}{extra}")
            for name, size in got.files.items():
                click.echo(f"    {name}  {_size(size)}")
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "target": o.target,
                        "kind": o.kind,
                        "commit": o.commit,
                        "files": o.files,
                        "bytes": o.bytes,
                        "verified": o.verified,
                    }
                    for o in outcomes
                ],
                indent=2,
            )
        )
    else:
        click.echo(f"total: {_size(sum(o.bytes for o in outcomes))} fetched for {len(outcomes)} target(s)")


COMMANDS = [prefetch_cmd]
