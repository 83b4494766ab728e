"""Model files from the Hugging Face Hub onto every host: fetch once, verify, fan out as a tree.

`source` reads the inventory's declaration, `fetch` brings the files onto the controller with a
manifest, `preflight` checks each host's disk before any byte moves, `fanout` distributes them
over the hosts' own network, and `phase.run_model_phase` ties them together for `glmops model`
and `glmops up` (both through glmops.run.run_model). `hostops` opens hosts through the engine's
sessions and reads their variables rendered (engine.hostvars.rendered_host).

It may import the engine (not its runner), glmops.gpu, glmops.hosthelpers and the ground floor;
never glmops.run, glmops.fleet, the modules or the CLI. Checked by tests/unit/test_layers.py.
"""
