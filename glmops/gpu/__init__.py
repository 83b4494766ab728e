"""The GPU path's policy: what glmops knows about GPUs, drivers, vLLM layouts and serving.

`gpus` (one table per GPU family), `facts` (typed host facts), `driver_policy`, `versions`,
`wheelcache`, `patchset/` (the vLLM patch set and attention backend, rendered from templates)
and `serving/` (vLLM's flags, backends and journal). Pure decisions from facts and settings:
it may import the ground floor (`glmops.errors`, `glmops.paths`, `glmops.pins`,
`glmops.unitfile`) and `glmops.hosthelpers` (reply types), nothing of the engine, the run
facade or the CLI. Checked by tests/unit/test_layers.py.
"""
