"""The `glmops` command line, on top of everything else: verbs, their options and their output.

`entry` (the console script: `--version` before anything loads), `main` (the click group, thin
command functions), `options` (shared options -> a run request),
`verb` (a playbook verb: listings, else the run facade), `up` (phases, progress, rules) and
`up_phases` (`run_up` and how each phase runs), `status`, `verify`, `facts_cmd`, `listing`,
`moddoc`. It may import every floor below (glmops.run first); nothing but `glmops.__main__`
imports it. Checked by tests/unit/test_layers.py.
"""
