# numpy's SeedSequence() without entropy, spawned into generators of several bit generators.
import numpy as np

ss = np.random.SeedSequence()
print("entropy", ss.entropy)
children = ss.spawn(3)
gens = [np.random.Generator(np.random.PCG64(c)) for c in children]
print([int(g.integers(1 << 30)) for g in gens])
print(np.random.Generator(np.random.Philox(np.random.SeedSequence())).random())
