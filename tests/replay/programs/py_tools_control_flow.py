# A tool result used in control flow: follow the lookup chain, branching on each value.
key, total, path = "start", 0, []
while key is not None:
    r = tools.corpus.lookup(key=key)
    path.append(r["key"])
    total += r["value"] * 2 if r["value"] % 2 == 1 and r["value"] > 10 else r["value"]
    key = r["next"]
print("path", " -> ".join(path), "sum", total)
print("big" if total > 50 else "small")
total
