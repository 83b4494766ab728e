"""The engine: an Ansible-style runner of playbooks over SSH, with no GPU knowledge.

Loading (`yamlsrc`, `playbook`, `inventory`, `templating`), connecting (`connection`, `sessions`,
`runlock`), running (`executor` -> `play_loop` -> `task_run`, `context` for what a module sees)
and reporting (`output`, `runlog`, `results`). It may import `glmops.errors`, `glmops.paths`,
`glmops.modules` (the registry it runs) and `glmops.hosthelpers`; never `glmops.cli`,
`glmops.gpu`, `glmops.fleet` or `glmops.model`.
"""
