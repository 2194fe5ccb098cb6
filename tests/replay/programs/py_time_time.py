# time.time and time.time_ns: reads around some work and a sleep, and their differences.
import time

a = time.time()
total = sum(i % 7 for i in range(100000))
b = time.time_ns()
time.sleep(0.03)
c = time.time()
print(a, b, c, total)
print("diffs", round(b / 1e9 - a, 6), round(c - b / 1e9, 6))
