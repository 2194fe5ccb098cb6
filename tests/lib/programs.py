"""Guest programs that tests at several levels run: the runners on their own
(tests/agent/runner_test.py) and whole runs through `sandbox run` (tests/integration)."""


def timer_race(language, tool, timer_ms):
    """A program in @language racing a timer of @timer_ms against a call of calc's @tool: it
    prints and returns which came first, 'timer' or 'tool' (the runner logs that order, and a
    replay keeps it: docs/protocol.md, "Replay")."""
    if language == "javascript":
        return f"""const r = await Promise.race([tools.calc.{tool}({{}}).then(() => 'tool'),
    new Promise((res) => setTimeout(() => res('timer'), {timer_ms}))]);
console.log(r);
r"""
    return f"""import asyncio
async def timer():
    await asyncio.sleep({timer_ms / 1000:g})
    return 'timer'
async def tool():
    await tools.calc.{tool}.aio({{}})
    return 'tool'
done, _ = await asyncio.wait([asyncio.ensure_future(tool()), asyncio.ensure_future(timer())],
                             return_when=asyncio.FIRST_COMPLETED)
r = done.pop().result()
print(r)
r"""
