# An uncaught exception whose message carries a random value and the clock: status error,
# with a traceback.
import random
import time

token = "%08x" % random.getrandbits(32)
print("about to raise", token)


def inner(t):
    raise ValueError(f"bad token {t} at {time.time()}")


def outer():
    inner(token)


outer()
