# Large output: ~500 KiB of lines of random bytes (hex) and a counter.
import os
import sys

total = 0
for i in range(6400):
    line = f"{i:05d} {os.urandom(36).hex()}"
    print(line)
    total += len(line) + 1
print("bytes written", total, file=sys.stderr)
total
