"""Beyond one host: the fleet's shape (topology), one replica across hosts (multinode, gang),
the rolling deploy (roll, which runs playbooks through a runner it is given: glmops.run's
fleet_runner), load for a soak (loadgen) and the router in front of the replicas (router).

It may import the engine (inventory, not its runner), glmops.gpu and the ground floor
(errors, paths, pins); never glmops.run, glmops.model or the CLI. Checked by
tests/unit/test_layers.py."""
