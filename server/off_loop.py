"""`off_loop(fn, ...)`: a handler's work of seconds run in a worker thread, not on the event loop.

What a request sends can take seconds of CPU to read: compiling a JSON schema of megabytes (4 MB: 5 s), tokenizing
a prompt of megabytes (10 MB: 12 s). On the event loop that held every other client, its streams and /health that
long; in a thread the loop has its turn every few milliseconds (the tokenizer lets go of the GIL altogether).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any


async def off_loop(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in the loop's default executor; what it raises (an APIError: a 400) comes through."""
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))
