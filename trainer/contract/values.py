"""How SageMaker's values read: every hyperparameter and SDK key arrives as a string or,
from the toolkit's reader, JSON-decoded ("false" -> False)."""
from __future__ import annotations

from typing import Any


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected a boolean (true/false)")
