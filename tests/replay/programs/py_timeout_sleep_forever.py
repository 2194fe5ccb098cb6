# A timeout (corpus.json: --timeout 4): clock-derived and random values printed, then a
# sleep that outlasts it. Status timeout.
import datetime
import random
import time

print("started at", datetime.datetime.now().isoformat(), time.monotonic(), random.random(), flush=True)
while True:
    time.sleep(3600)
