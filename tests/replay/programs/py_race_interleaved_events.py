# asyncio timers and tool results interleaved: sleeps of 0, 0.6, 1.8 and 3.6 s and calls
# answering after 300 and 2600 ms; the events in the order they happened are the output.
import asyncio
import time

log = []
t0 = time.monotonic()


async def timer(s):
    await asyncio.sleep(s)
    log.append(f"timer{s} at +{round(time.monotonic() - t0, 3)}")


async def call(ms):
    r = await tools.corpus.sleep_echo.aio({"id": ms, "ms": ms})
    log.append(f"tool{r['id']} at +{round(time.monotonic() - t0, 3)}")


await asyncio.gather(*(timer(s) for s in (0, 0.6, 1.8, 3.6)), *(call(ms) for ms in (300, 2600)))
print("\n".join(log))
