# random's other functions on the module generator: randint, choice, choices, shuffle,
# sample, uniform, gauss, getrandbits, randbytes.
import random

deck = list(range(20))
random.shuffle(deck)
print("shuffle", deck)
print("randint", [random.randint(1, 6) for _ in range(12)])
print("choice", random.choice("abcdefgh"), "choices", random.choices("xyz", weights=[5, 3, 1], k=8))
print("sample", random.sample(range(100), 5))
print("uniform", random.uniform(-1, 1), "gauss", random.gauss(0, 1))
print("bits", random.getrandbits(70), "bytes", random.randbytes(6).hex())
