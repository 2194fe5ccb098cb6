# numpy's legacy global generator: rand, randint, normal, choice, shuffle, permutation.
import numpy as np

print(np.random.rand(4))
print(np.random.randint(0, 100, size=8))
print(np.round(np.random.normal(10, 2, size=5), 6))
print(np.random.choice(["a", "b", "c"], size=6))
arr = np.arange(10)
np.random.shuffle(arr)
print(arr, np.random.permutation(5))
float(np.random.random())
