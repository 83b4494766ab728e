# For mypy only: helpers import their envelope as the top-level module `_envelope` (its name on
# a host); this stub gives mypy that name for glmops/hosthelpers/_envelope.py.
from glmops.hosthelpers._envelope import *  # noqa: F403
from glmops.hosthelpers._envelope import TypedDict as TypedDict
