"""Audits of the harness's claims: ``bound`` (exact NLL vs the sub-token bound vs the paper objective),
``idle`` / ``idle_measure`` (idle steps of the ancestral sampler, analytic and measured),
``gumbel`` / ``gumbel_audit`` (what a finite-precision Gumbel-max draw samples) and ``precision``
(fp32 vs fp64 sampling). Import the submodules; this package imports nothing, so the command line
can read their defaults without loading torch."""
