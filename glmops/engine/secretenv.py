"""The environment variables glmops reads secrets from, and the environment its local children
get without them.

One list, so a command glmops starts on the controller (`connection: local`,
`delegate_to: localhost`, the host checks' `local://` launches) never inherits the sudo
password or a Hub token: masking goes by exact value, and a child can print a secret
transformed (`env | rev`) where no mask would find it.
"""

from __future__ import annotations

import os

#: The sudo password (`-K` asks for it instead).
BECOME_PASSWORD = "GLMOPS_BECOME_PASSWORD"
#: The Hugging Face token: glmops' model fetch reads HF_TOKEN, huggingface_hub also the old name.
HF_TOKENS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
SECRET_ENV = (BECOME_PASSWORD, *HF_TOKENS)


def become_password() -> str | None:
    """The sudo password from the environment, or None."""
    return os.environ.get(BECOME_PASSWORD)


def hf_token() -> str | None:
    """The Hugging Face token from the environment, or None."""
    return next((os.environ[name] for name in HF_TOKENS if os.environ.get(name)), None)


def secret_values() -> list[str]:
    """The values of the SECRET_ENV variables that are set (for the masker)."""
    return [os.environ[name] for name in SECRET_ENV if os.environ.get(name)]


def child_environment() -> dict[str, str]:
    """This process's environment less every variable of SECRET_ENV."""
    return {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
