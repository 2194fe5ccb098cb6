# A tool result racing a timer, the tool far ahead: asyncio.wait FIRST_COMPLETED of an echo
# and a 5 s sleep (cancelled once the tool won).
import asyncio
import time

tool = asyncio.ensure_future(tools.corpus.echo.aio({"who": "tool"}))
timer = asyncio.ensure_future(asyncio.sleep(5, result="timer"))
done, pending = await asyncio.wait({tool, timer}, return_when=asyncio.FIRST_COMPLETED)
for p in pending:
    p.cancel()
print("winner", [t.result()["who"] if t is tool else t.result() for t in done], time.time())
