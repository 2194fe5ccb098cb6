# Session execution 1 of 3: state for the next ones, from randomness and the clock.
import random
import time
import uuid

session_seed = random.random()
session_start = time.time()
session_id = str(uuid.uuid4())


def session_next(k):
    return int(session_seed * 1000) + k


print("defined", session_seed, session_start, session_id)
