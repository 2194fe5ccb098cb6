# os.urandom in several sizes (read from the execution's stream).
import os

print(os.urandom(16).hex())
print(os.urandom(1).hex(), os.urandom(33).hex())
print(int.from_bytes(os.urandom(8), "big"))
