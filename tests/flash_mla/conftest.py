"""flash_mla test settings: the ``backend`` fixture for tests that run one public contract on each path.

``backend`` parametrises over "reference", "host" (only where ``flash_mla.host`` exists) and "ascend" (the
Ascend kernels on deepjit's Ascend twin, CPU tensors) by setting ``FMLA_BACKEND`` for the duration of the
test; under "ascend" a call the table would serve elsewhere skips the case naming the op (see
tests/testkit/backends.py). A test that compares with the reference itself runs on the other backends only
(``@pytest.mark.backends("host", "ascend", why=...)``). Tests without the fixture run on the default path
(the host kernels for CPU tensors). What only the Ascend kernels have lives in ``ascend/``."""
import importlib.util

import flash_mla._dispatch
from tests.testkit.backends import make_backend_fixture

BACKENDS = ["reference"] + (["host"] if importlib.util.find_spec("flash_mla.host") is not None else []) + ["ascend"]

backend = make_backend_fixture("FMLA", flash_mla._dispatch.TABLE, BACKENDS)
