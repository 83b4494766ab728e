"""command and shell: run a command; `creates`/`removes` make it idempotent."""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, register


@register
class Command(Module):
    """Run a program with arguments, no shell: `command: systemctl is-active vllm`.

    A string is split into words when the playbook loads, before templating, so a variable's
    value is always exactly one word, quoted: it can never add words or shell syntax.
    Or give `argv:` as a list.
    """

    name = "command"
    free_form = "cmd"
    result_defaults = {
        "rc": None,
        "stdout": "",
        "stderr": "",
        "stdout_lines": [],
        "stderr_lines": [],
    }
    args = {
        "cmd": Arg(str, doc="the command line"),
        "argv": Arg(list, doc="the command as a list of words (instead of cmd)"),
        "creates": Arg(str, doc="skip when this path exists"),
        "removes": Arg(str, doc="skip unless this path exists"),
        "chdir": Arg(str, doc="run in this directory"),
        "expect_rc": Arg(list, default=[0], doc="return codes that count as success"),
    }

    @classmethod
    def normalize(cls, raw: dict) -> dict:
        if raw.get("cmd") is not None and raw.get("argv") is None:
            if not isinstance(raw["cmd"], str):
                raise ValueError(
                    f"argument 'cmd' of 'command' must be a string, got {raw['cmd']!r}"
                )
            raw = {**raw, "argv": split_template_words(raw["cmd"])}
        return raw

    def command_line(self) -> str:
        words = self.params["argv"]
        if not words:
            raise ModuleError("command: give cmd or argv")
        return " ".join(quote(word) for word in words)

    def plan(self, ctx: TaskContext) -> Plan:
        creates, removes = self.params["creates"], self.params["removes"]
        if creates or removes:
            probe = ctx.run(f"test -e {quote(creates or removes)}")
            if creates and probe.ok:
                return Plan(False, f"{creates} exists")
            if removes and not probe.ok:
                return Plan(False, f"{removes} does not exist")
        elif ctx.check:
            # Nothing says whether it would change anything: not run, as in Ansible.
            return Plan(None, "not run: no creates/removes (check_mode: false runs it)")
        return Plan(True, f"would run: {self.command_line()}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        line = self.command_line()
        if self.params["chdir"]:
            line = f"cd {quote(self.params['chdir'])} && {line}"
        result = ctx.run(line)
        data = {
            "cmd": line,
            "rc": result.rc,
            # Ansible's: without the trailing newline, so `when: out.stdout == "ok"` works.
            "stdout": result.stdout.rstrip("\r\n"),
            "stderr": result.stderr.rstrip("\r\n"),
            "stdout_lines": result.stdout.splitlines(),
            "stderr_lines": result.stderr.splitlines(),
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

    @classmethod
    def normalize(cls, raw: dict) -> dict:
        return raw

    def command_line(self) -> str:
        return self.params["cmd"]


def split_template_words(text: str) -> list[str]:
    """Split a command line into words like a shell (quotes, whitespace), keeping each
    `{{ ... }}` or `{% ... %}` whole inside its word, whatever it contains."""
    words: list[str] = []
    word, in_word, i = "", False, 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in ("{{", "{%"):
            end = text.find("}}" if pair == "{{" else "%}", i + 2)
            end = len(text) if end < 0 else end + 2
            word, in_word, i = word + text[i:end], True, end
        elif text[i] in "'\"":
            end = text.find(text[i], i + 1)
            if end < 0:
                raise ValueError(f"unterminated quote in command: {text}")
            word, in_word, i = word + text[i + 1 : end], True, end + 1
        elif text[i].isspace():
            if in_word:
                words.append(word)
            word, in_word, i = "", False, i + 1
        else:
            word, in_word, i = word + text[i], True, i + 1
    if in_word:
        words.append(word)
    return words
