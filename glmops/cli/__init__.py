"""The `glmops` command line, on top of everything else: verbs, their options and their output.

`main` (the click group and `glmops run`), `options` (shared options -> engine settings), `up` and
`up_phases` (`glmops up`), `status`, `verify`, `facts_cmd`, `listing`, `moddoc`. Nothing below
this package imports it.
"""
