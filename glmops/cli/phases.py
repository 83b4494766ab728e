"""The phases of `glmops up`, in order: a name the command line shows in its help without
loading what runs them (glmops/cli/up.py)."""

PHASES = ("provision", "patch", "model", "deploy", "verify")
