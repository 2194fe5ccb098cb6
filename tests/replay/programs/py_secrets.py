# secrets: token_hex, token_bytes, token_urlsafe, randbelow, choice, randbits.
import secrets

print(secrets.token_hex(16))
print(secrets.token_bytes(8).hex(), secrets.token_urlsafe(12))
print(secrets.randbelow(10**9), secrets.choice(["north", "south", "east", "west"]), secrets.randbits(40))
