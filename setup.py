"""Build hook: ship playbooks/, templates/, backend/ and tests/host/ inside the wheel.

They stay top-level folders in the checkout; a wheel carries copies under glmops/_shipped/,
where glmops.paths finds them. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("playbooks", "templates", "backend", "tests/host")


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        target = Path(self.build_lib) / "glmops" / "_shipped"
        for folder in SHIPPED:
            shutil.copytree(
                Path(folder),
                target / folder,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )


setup(cmdclass={"build_py": BuildWithShippedFiles})
