"""The engine: an Ansible-style runner of playbooks over SSH, with no GPU knowledge.

Loading (`yamlsrc`, `playbook`, `inventory`, `templating`), connecting (`connection`, `sessions`,
`runlock`), running (`executor` -> `play_loop` -> `task_run`, `context` for what a module sees;
`sessions` is the one door to a host, also for the model phase and verify) and reporting
(`output`, `runlog`, `results`, whose `exit_code` is every verb's rule). It may import
`glmops.errors`, `glmops.paths`, `glmops.pins`, `glmops.modules` (the registry it runs),
`glmops.gpu.facts` (the typed facts a module reads) and `glmops.hosthelpers`; never
`glmops.cli`, `glmops.run`, `glmops.fleet`, `glmops.model` or the rest of `glmops.gpu`.
Checked by tests/unit/test_layers.py.
"""
