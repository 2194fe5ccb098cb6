# Session execution 3 of 3: the state of both earlier executions, printed together.
import datetime

print("all", session_seed, session_second, session_next(3), datetime.datetime.now().isoformat())
session_next(3)
