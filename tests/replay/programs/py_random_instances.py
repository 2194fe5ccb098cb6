# random.Random() without a seed and random.SystemRandom: new generators, seeded from (or
# drawing on) the execution's stream; a seeded Random(42) beside them stays fixed.
import random

a = random.Random()
b = random.Random()
s = random.SystemRandom()
fixed = random.Random(42)
print("a", a.random(), a.randint(0, 10**9))
print("b", b.random())
print("system", s.random(), s.randrange(10**12), s.choice(["p", "q", "r"]))
print("fixed", fixed.random())
