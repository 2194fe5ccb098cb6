# Every Python source of randomness in one order: a replay that drew any of them from another
# place, or in another order, prints something else.
import os, random, secrets, uuid
import numpy as np

print(random.random(), os.urandom(4).hex(), secrets.token_hex(4), uuid.uuid4())
print(float(np.random.rand()), int(np.random.default_rng().integers(1 << 40)), random.SystemRandom().random())
print(random.random())
