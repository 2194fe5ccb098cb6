# Tool inputs made of random values; the digests printed depend on the seed.
import random
import secrets
import uuid

words = ["".join(random.choice("abcdefghij") for _ in range(6)) for _ in range(4)]
uid = str(uuid.uuid4())
d = tools.corpus.digest({"text": " ".join(words) + uid})
print(words, uid)
print(d["sha256"], d["length"])
print(tools.corpus.echo({"id": uid, "n": secrets.randbelow(10**6)}))
