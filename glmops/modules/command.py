"""command and shell: run a command; `creates`/`removes` make it idempotent."""

from __future__ import annotations

import shlex

from glmops.connection import quote
from glmops.context import TaskContext
from glmops.modules.base import Arg, Module, Plan, register
from glmops.results import Status, TaskResult


@register
class Command(Module):
    """Run a program with arguments, no shell: `command: systemctl is-active vllm`.

    Given as a string it is split like a shell would (`shlex`) and each word is quoted again,
    so nothing in it is interpreted by the remote shell; or give `argv:` as a list.
    """

    name = "command"
    free_form = "cmd"
    args = {
        "cmd": Arg(str, doc="the command line"),
        "argv": Arg(list, doc="the command as a list of words (instead of cmd)"),
        "creates": Arg(str, doc="skip when this path exists"),
        "removes": Arg(str, doc="skip unless this path exists"),
        "chdir": Arg(str, doc="run in this directory"),
        "expect_rc": Arg(list, default=[0], doc="return codes that count as success"),
    }

    def command_line(self) -> str:
        words = self.params["argv"] or shlex.split(self.params["cmd"] or "")
        if not words:
            raise ValueError("command: give cmd or argv")
        return " ".join(quote(word) for word in words)

    def plan(self, ctx: TaskContext) -> Plan:
        creates, removes = self.params["creates"], self.params["removes"]
        if creates or removes:
            probe = ctx.run(f"test -e {quote(creates or removes)}")
            if creates and probe.ok:
                return Plan(False, f"{creates} exists")
            if removes and not probe.ok:
                return Plan(False, f"{removes} does not exist")
        return Plan(True, f"would run: {self.command_line()}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        line = self.command_line()
        if self.params["chdir"]:
            line = f"cd {quote(self.params['chdir'])} && {line}"
        result = ctx.run(line)
        data = {
            "rc": result.rc,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "duration": round(result.duration, 3),
        }
        if result.rc not in self.params["expect_rc"]:
            tail = (result.stderr.strip() or result.stdout.strip())[-800:]
            return TaskResult(Status.FAILED, f"rc={result.rc}: {tail}", data=data)
        return TaskResult(Status.CHANGED, f"ran (rc={result.rc})", data=data)


@register
class Shell(Command):
    """Run a line through /bin/sh, with pipes and redirection: the playbook author quotes."""

    name = "shell"
    args = {key: arg for key, arg in Command.args.items() if key != "argv"}

    def command_line(self) -> str:
        return self.params["cmd"]
