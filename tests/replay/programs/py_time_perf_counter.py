# time.perf_counter and perf_counter_ns timing a loop, printed exactly.
import time

t0 = time.perf_counter()
n0 = time.perf_counter_ns()
x = sum(i * i for i in range(50000))
t1 = time.perf_counter()
n1 = time.perf_counter_ns()
print(t0, t1, n0, n1, x)
print("elapsed", t1 - t0, n1 - n0)
