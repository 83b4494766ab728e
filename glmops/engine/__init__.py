"""The engine: an Ansible-style runner of playbooks over SSH, with no GPU knowledge.

Loading (`yamlsrc`; `playbook` -> `structure` -> `roles`, with `playparse` for a play's and a
task's own keys, `loading` for what structure and roles share, all into the types of `nodes`;
`inventory`, `templating`), connecting (`connect` picks `connection` or `openssh`; `sessions`,
`runlock`), running (`executor` -> `play_loop` -> `block_run` and `task_run`, `prefetch` filling
each host's `checkcache`, `context` for what a module sees; `sessions` is the one door to a host,
also for the model phase and verify) and reporting (`output`, `runlog`, `results`, whose
`exit_code` is every verb's rule). It may import the ground floor (`glmops.errors`,
`glmops.paths`, `glmops.pins`, `glmops.unitfile`), `glmops.modules` (the registry it runs),
`glmops.gpu.facts` (the typed facts a module reads) and `glmops.hosthelpers`; never
`glmops.cli`, `glmops.run`, `glmops.fleet`, `glmops.model` or the rest of `glmops.gpu`.
Checked by tests/unit/test_layers.py.
"""
