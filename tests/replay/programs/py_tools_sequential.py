# Tool calls one after another (the blocking form); each result printed and fed onward.
a = tools.corpus.echo({"n": 1, "words": ["alpha", "beta"]})
print("echo", a)
b = tools.corpus.digest(text="-".join(a["words"]))
print("digest", b["sha256"], b["length"])
c = tools.corpus.lookup({"key": "start"})
print("lookup", c)
d = tools.corpus.echo({"prev": b["sha256"][:8], "value": c["value"] * 2})
print("echo again", d)
d
