# The clock read between tool calls: how long each call took, as the program saw it.
import time

t = (time.time(), time.perf_counter())
tools.corpus.sleep_echo({"id": "a", "ms": 300})
t2 = (time.time(), time.perf_counter())
tools.corpus.echo({"x": 1})
t3 = (time.time(), time.perf_counter())
print("wall", t[0], t2[0], t3[0])
print("took", t2[1] - t[1], t3[1] - t2[1], t2[1] - t[1] >= 0.3)
