"""A normal, non-editable install works: build the wheel, install it into a fresh venv, and run
the verbs that need the playbooks and templates it must carry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files a clean build sees")
    return [line for line in listed.stdout.splitlines() if (REPO / line).is_file()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (with this interpreter's packages for the dependencies, so no network) that has
    glmops only from the wheel; returns its bin/ folder."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in _tracked_files():  # a clean copy: what a fresh clone would build
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    wheels = work / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(wheels), str(source)],
        check=True,
    )  # fmt: skip
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    wheel = next(wheels.glob("glmops-*.whl"))
    subprocess.run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
    )
    return venv / "bin"


def _glmops(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [bin_dir / "glmops", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_the_wheel_runs_without_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [installed / "python", "-c", "import glmops, glmops.paths as p; print(glmops.__file__);"
         " print(p.root())"],
        cwd=tmp_path, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    package, root = where.stdout.split()
    assert package.startswith(str(installed.parent)), f"glmops came from {package}"
    assert root.startswith(str(installed.parent)) and root.endswith("_shipped")

    helped = _glmops(installed, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "provision" in helped.stdout

    shipped = Path(root) / "playbooks" / "deploy.yml"
    checked = _glmops(installed, "run", str(shipped), "--syntax-check", cwd=tmp_path)
    assert checked.returncode == 0 and "syntax ok" in checked.stdout, checked.stderr

    listed = _glmops(installed, "deploy", "--list-tasks", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "_shipped/playbooks/deploy.yml" in listed.stdout

    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    here: {connection: local}\n")
    doc = _glmops(installed, "doc", "vllm_patchset", cwd=tmp_path)
    assert doc.returncode == 0 and "venv" in doc.stdout


def test_patch_templates_render_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """The patch set's Jinja templates and the kernel source it inlines come from the wheel."""
    code = (
        "from glmops.gpu.patchset import render; "
        "print(render.TEMPLATE_DIR); print(sorted(p.name for p in render.TEMPLATE_DIR.iterdir()));"
        "print(len(render.kernel_source()) > 100_000)"
    )
    result = subprocess.run(
        [installed / "python", "-c", code], cwd=tmp_path, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    folder, names, kernel = result.stdout.splitlines()
    assert folder.startswith(str(installed.parent)) and "triton_mla_sparse.py.j2" in names
    assert kernel == "True"


def test_up_finds_its_playbooks_in_the_wheel(installed: Path, tmp_path: Path) -> None:
    """`glmops up` fingerprints and runs the wheel's playbooks: the deploy phase alone, in check
    mode on this machine, where it stops at the model files this host lacks."""
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  hosts:\n    here: {{connection: local, state_dir: '{tmp_path}/state'}}\n"
    )
    skip = "provision,patch,model,verify"
    done = _glmops(
        installed, "up", "here", "-i", "hosts.yml", "--check", "--skip", skip, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "_shipped/playbooks/deploy.yml:" in done.stdout, done.stdout
