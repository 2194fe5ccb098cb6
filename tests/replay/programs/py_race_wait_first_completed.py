# asyncio.wait(FIRST_COMPLETED) of a tool call and an asyncio.sleep: the sleep (100 ms) wins
# over the 3 s call, then the call is awaited to its end; both printed with the clock.
import asyncio
import datetime

tool = asyncio.ensure_future(tools.corpus.sleep_echo.aio({"id": "tool", "ms": 3000}))
timer = asyncio.ensure_future(asyncio.sleep(0.1, result="timer"))
done, pending = await asyncio.wait({tool, timer}, return_when=asyncio.FIRST_COMPLETED)
print("first", [t.result() if t is timer else t.result()["id"] for t in done], datetime.datetime.now().isoformat())
print("then", (await tool)["id"], datetime.datetime.now().isoformat())
