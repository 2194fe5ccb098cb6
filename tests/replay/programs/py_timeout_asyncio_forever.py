# A timeout in asyncio (corpus.json: --timeout 4): a tool call answered, the clock printed,
# then an await of a future that never completes.
import asyncio
import time

r = await tools.corpus.echo.aio({"step": 1})
print("step", r["step"], time.time(), time.perf_counter_ns(), flush=True)
await asyncio.get_running_loop().create_future()
