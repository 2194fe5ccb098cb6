# Parallel tool calls whose results arrive out of order (asyncio.gather of the .aio form;
# sleep_echo answers after input.ms): the arrival order is printed, then gather's (issue) order.
import asyncio
import time

arrivals = []
t0 = time.perf_counter()


async def call(name, ms):
    r = await tools.corpus.sleep_echo.aio({"id": name, "ms": ms})
    arrivals.append(r["id"])
    print("arrived", r["id"], "after", round(time.perf_counter() - t0, 6))
    return r


results = await asyncio.gather(call("slow", 2400), call("medium", 1200), call("fast", 50))
print("arrival order", " > ".join(arrivals))
print("issue order", " > ".join(r["id"] for r in results))
