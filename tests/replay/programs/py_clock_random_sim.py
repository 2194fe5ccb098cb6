# Randomness and the clock together: a simulated job queue whose jitter comes from random
# and whose timestamps come from time.monotonic and datetime.now.
import datetime
import random
import time

start = time.monotonic()
for i in range(6):
    jitter = random.randint(0, 20)
    time.sleep(jitter / 1000)
    print(i, jitter, datetime.datetime.now().strftime("%H:%M:%S.%f"), round(time.monotonic() - start, 6))
