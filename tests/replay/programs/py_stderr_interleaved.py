# stdout and stderr interleaved, which stream depends on random draws.
import random
import sys

for i in range(20):
    r = random.random()
    print(i, f"{r:.6f}", file=sys.stdout if r < 0.5 else sys.stderr)
