"""The hostile suite shares the integration tests' fixtures and helpers (test/integration/
conftest.py): loaded here under a name of its own, its fixtures and hooks re-exported."""

import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("sbx_integration_conftest", _path)
_mod = importlib.util.module_from_spec(_spec)
sys.modules["sbx_integration_conftest"] = _mod
_spec.loader.exec_module(_mod)

globals().update({k: v for k, v in vars(_mod).items() if not k.startswith("__")})
