# A chained exception (raise ... from ...) after a tool call, uncaught.
import secrets

r = tools.corpus.echo({"n": 3})
nonce = secrets.token_hex(4)
print("echo said", r["n"], "nonce", nonce)
try:
    {}["missing-" + nonce]
except KeyError as e:
    raise RuntimeError(f"lookup failed for n={r['n']}") from e
