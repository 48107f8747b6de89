"""strata.server.cache: the conversation cache below the slots (seed 002, DESIGN.md §5).

RAM -> warm disk -> cold disk levels that degrade instead of delete, parking with two RAM floors,
the segment tier, the system-prompt cache, streamed restore with the restore ladder, and named
sessions. `policy.py` holds the rules (pure); the other modules apply them.
"""

from .cache import ConversationCache
from .options import OPTIONS, CacheConfig, CacheConfigError, OptionSpec
from .parking import ParkResult
from .restoring import CacheHit, RestoreResult

__all__ = ["OPTIONS", "CacheConfig", "CacheConfigError", "CacheHit", "ConversationCache", "OptionSpec",
           "ParkResult", "RestoreResult"]
