# A timer racing a tool result: asyncio.wait_for gives a 3 s call 0.2 s, and times out; a
# fast call within the same bound answers. What happened and when is printed.
import asyncio
import time

t0 = time.monotonic()
try:
    r = await asyncio.wait_for(tools.corpus.sleep_echo.aio({"id": "slow", "ms": 3000}), 0.2)
    print("slow answered", r)
except (asyncio.TimeoutError, TimeoutError):
    print("slow timed out", round(time.monotonic() - t0, 6))
r = await asyncio.wait_for(tools.corpus.sleep_echo.aio({"id": "fast", "ms": 10}), 10)
print("fast answered", r, round(time.monotonic() - t0, 6))
