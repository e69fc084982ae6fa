"""Onboarding a new Spark, or replacing a failed one: `invoke onboard` (run.py), one module
per step, each step's policy in its `run(ctx)` (docs/onboarding.md; the modules:
docs/onboarding.md#the-code).
"""

from sparkrack.onboard.context import OnboardReport, Step
from sparkrack.onboard.run import as_json, onboard

__all__ = ["OnboardReport", "Step", "as_json", "onboard"]
