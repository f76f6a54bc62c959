"""Transitional aliases (removed once every caller reads :mod:`.env` and :mod:`.state`)."""

from .env import FLAG, Mode, SwitchError, parse_mode
from .env import SWITCH as ENV
from .env import parse_mode_or_off as safe_mode
from .state import current_mode
from .state import is_strict as strict

__all__ = ["ENV", "FLAG", "Mode", "SwitchError", "current_mode", "parse_mode", "safe_mode", "strict"]
