# Session execution 2 of 3: uses the state of execution 1, draws again, calls a tool.
elapsed = time.time() - session_start
r = tools.corpus.echo({"id": session_id, "next": session_next(2)})
print("from 1", r["id"] == session_id, r["next"], "elapsed", elapsed)
session_second = random.random()
print("second draw", session_second)
