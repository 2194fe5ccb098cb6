# A failing tool: ToolError caught and printed, then calls that succeed and fail in a gather
# with return_exceptions.
import asyncio

try:
    tools.corpus.fail({"why": "first"})
    print("not reached")
except ToolError as e:
    print("caught", type(e).__name__, e.code, repr(e.message))
res = await asyncio.gather(tools.corpus.echo.aio({"ok": True}), tools.corpus.fail.aio({"why": "second"}),
                           tools.corpus.lookup.aio({"key": "nowhere"}), return_exceptions=True)
for r in res:
    print(type(r).__name__, r.code if isinstance(r, Exception) else r)
