# numpy's default_rng() without a seed (it draws from secrets), and one with a fixed seed.
import numpy as np

rng = np.random.default_rng()
print(rng.integers(0, 1 << 40, size=4))
print(np.round(rng.standard_normal(3), 8), rng.permutation(6))
other = np.random.default_rng()
print(other.random())
print(np.random.default_rng(7).random())  # fixed: the same in every run
