"""Faults at random on the rehearsal rack: a seeded run of operator commands with faults
injected inside them, the rack's real state checked after every step.

    plan.steps(seed, count, nodes)   the run, pure: the same seed gives the same steps
    runner.run_step(...)             one step on the rack: the command, its fault, healing
    invariants.check(...)            what must hold after every step (over SSH and docker)
    report.Report                    steps, outcomes, faults, violations, recovery times

benchmarks/chaos.py drives it: `--seed S --steps N`, `--replay S --until K`.
"""
