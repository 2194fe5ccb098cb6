# time.monotonic and time.monotonic_ns across sleeps of several lengths.
import time

m = [time.monotonic()]
for s in (0.005, 0.02, 0.05):
    time.sleep(s)
    m.append(time.monotonic())
ns = time.monotonic_ns()
print(m)
print([round(b - a, 6) for a, b in zip(m, m[1:])], ns)
