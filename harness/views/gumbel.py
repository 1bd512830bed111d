"""The view that ``primebench audit gumbel`` prints: a ``gumbel`` record as a rich table (per class
for ``--probs``, per row for ``--mdlm-step``) and notes that say what each source and count means."""

from __future__ import annotations

import math

from rich.table import Table

from harness.logging import stdout_console

#: --probs with more classes: the first DISPLAY_CLASSES - 1 are shown, the rest summed in one row
DISPLAY_CLASSES = 12


def _p(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:.3e}" if abs(v) < 1e-4 else f"{v:.8f}"


def _label(r: dict) -> tuple[str, str, str]:
    names = {"intended": "intended", "prop5.2": "Prop. 5.2", "grid": "grid model", "empirical": "empirical"}
    return names[r["source"]], r["dtype"] or "", r["method"] or ""


def _notes(record: dict) -> list[str]:
    p, levels = record["protocol"], record["truncation_levels"]
    intended = next(r["unmask_mass"] for r in record["rows"] if r["source"] == "intended")
    m_text = "; ".join(f"{d}: M = {M:.4f} (U on a 2^-{p['uniform_bits'][d]} grid)" for d, M in levels.items())
    n = p["draws"]
    notes = [
        "KL = KL(row || intended). "
        f"M = -log(-log(1 - 2^-b)) is the largest Gumbel noise torch.rand can give: {m_text}. "
        "Prop. 5.2 = Zheng et al.'s closed form for noise truncated at M; grid model = torch.rand's grid "
        "(float32 distorts about half as much as Prop. 5.2).",
        f"empirical: {n} draws per row; an event of probability ~2^-24 (where the float32 effect lives) needs "
        f"~2^24 = {2**24:.2e} draws to be seen once, so masses below ~1/{n} = {1 / n:.1e} may show 0 events: "
        "that is the draw count, not evidence against the effect. Empirical KL and entropy are plug-in "
        "estimates (noisy, biased when there are few events).",
    ]
    if p["mode"] == "mdlm-step":
        notes.append(
            f"MDLM ancestral step {p['step']} of {p['steps']} (linear): a masked position unmasks with "
            f"the intended mass above and each of the V = {p['vocab']} tokens gets that mass times p(token) "
            f"(flat: {_p(1 / p['vocab'])} x mass); 2^-24 = {2**-24:.2e}. Token entropy = entropy of the "
            f"token part renormalised. Expected unmasking events in {n} draws: "
            f"{n * intended:.3g} intended."
        )
        if p["draws_limited_by_budget"]:
            notes.append(
                f"draws limited to {n} so that each row costs at most {p['element_budget']:,} uniforms "
                "(V + 1 per draw); pass --draws to draw more."
            )
    elif not math.isclose(p["input_sum"], 1.0, rel_tol=1e-9):
        notes.append(f"the given probabilities summed to {p['input_sum']:.6g} and were normalised.")
    return notes


def render_gumbel(record: dict) -> None:
    """One ``gumbel`` record on stdout, then its notes."""

    rows, p = record["rows"], record["protocol"]
    out = stdout_console()
    if p["mode"] == "probs":
        K = len(rows[0]["probs"])
        shown = K if K <= DISPLAY_CLASSES else DISPLAY_CLASSES - 1
        table = Table(
            title=f"Gumbel-max over K = {K} classes: intended vs closed forms vs draws (columns), per class (rows)"
        )
        table.add_column("class", no_wrap=True)
        for r in rows:
            header = "\n".join(x for x in _label(r) if x).replace("mdlm-legacy", "mdlm-\nlegacy")
            table.add_column(header.replace("grid model", "grid\nmodel"), justify="right")
        for k in range(shown):
            table.add_row(f"p[{k}]", *(_p(r["probs"][k]) for r in rows))
        if shown < K:
            table.add_row(f"rest ({K - shown} classes)", *(_p(sum(r["probs"][shown:])) for r in rows))
        table.add_row("KL nats", *(f"{r['kl']:.3e}" for r in rows), style="bold")
        table.add_row("entropy nats", *(f"{r['entropy']:.8f}" for r in rows), style="bold")
    else:
        table = Table(
            title=f"MDLM ancestral step {p['step']}/{p['steps']}, V = {p['vocab']}: unmasking mass and token part"
        )
        for name, justify in (
            ("tokens", "left"),
            ("distribution", "left"),
            ("dtype", "left"),
            ("method", "left"),
            ("unmask mass", "right"),
            ("/ intended", "right"),
            ("KL(.||intended) nats", "right"),
            ("token entropy nats", "right"),
            ("events / draws", "right"),
        ):
            table.add_column(name, justify=justify)
        intended = {r["case"]: r["unmask_mass"] for r in rows if r["source"] == "intended"}
        for r in rows:
            mass = _p(r["unmask_mass"])
            if r["unmask_stderr"] is not None:
                mass += f" ± {_p(r['unmask_stderr'])}"
            elif r["events"] == 0:
                mass += f" (< {3 / r['draws']:.1e}, 95%)"  # rule of three
            ent = "n/a (0 events)" if r["entropy"] is None else f"{r['entropy']:.6f}"
            events = "" if r["draws"] is None else f"{r['events']} / {r['draws']}"
            table.add_row(
                r["case"] if r["source"] == "intended" else "",
                *_label(r),
                mass,
                f"{r['unmask_mass'] / intended[r['case']]:.6f}",
                f"{r['kl']:.3e}",
                ent,
                events,
                end_section=r is rows[-1] or rows[rows.index(r) + 1]["source"] == "intended",
            )
    out.print(table)
    for note in _notes(record):
        out.print(note, highlight=False)


__all__ = ["DISPLAY_CLASSES", "render_gumbel"]
