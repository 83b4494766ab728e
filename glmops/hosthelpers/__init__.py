"""Host-side helpers: stdlib-only scripts the engine runs on a host, one round trip each.

Each imports the shared envelope (arguments in, one JSON reply out, errors) as the top-level
module `_envelope`, the name it has on a host, where the launcher sends it ahead of the helper.
Imported here, on the controller, the helpers find it under the same name.
"""

import sys

from glmops.hosthelpers import _envelope

sys.modules.setdefault("_envelope", _envelope)
