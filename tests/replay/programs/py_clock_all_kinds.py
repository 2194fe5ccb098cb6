# Every Python clock read interleaved in one order.
import datetime
import time

v = [time.time(), time.monotonic(), time.perf_counter(), time.time_ns(), time.monotonic_ns(),
     time.perf_counter_ns(), datetime.datetime.now().isoformat(), datetime.date.today().isoformat(),
     time.strftime("%H:%M:%S"), time.ctime()]
time.sleep(0.01)
v += [time.perf_counter_ns(), datetime.datetime.utcnow().isoformat(), time.time()]
for x in v:
    print(x)
